"""Does every job fit the memory it is given? Checked when the run is planned, before any job is submitted.

Each job on GPUs is sized by forgetmap.memory from the base's config (no weights read) and compared with
the GPU memory its stage is known to have (`Plan.gpu_memory`: `resources.STAGE.gpu_memory_gib`, or the GPU
model the profile names): a fine-tune (each kind of its tasks' settings, each mitigation arm), a score job
(torch or vLLM), the gradient- and semantic-similarity jobs. A job that cannot fit is refused naming the
key, the figures and what would make it fit; one that fits only some of the cards a GPU model names is said
in the table. The table of every job goes to the run's log (a dry run prints it). A fine-tune's host memory
request is checked against what its processes hold (`host_request` sizes it where the config leaves it
unset).
"""

from __future__ import annotations

import json
import math
import sys

from ..errors import ConfigError

def check(plan) -> None:
    """Each GPU job fits its GPUs and each FSDP fine-tune its host memory; the table goes to stderr."""
    from ..memory import GIB, HOST_MARGIN, on_card

    rows = [{**row, "requested": plan.resource(model, "finetune", "mem_mb")}
            for model in plan.computed for row in plan.finetune_memory(model) if row["cuda"]]
    rows += [row for model in plan.computed for row in inference_rows(plan, model)]
    if rows:
        print(memory_table(rows), file=sys.stderr)
    for row in rows:
        need, gpu = row["need"], row["gpu"]
        if row["backend"] == "vllm":
            check_engine(plan, row["model"])
        elif gpu is not None and not isinstance(need, str) and on_card(need.device) > gpu.high:
            raise ConfigError(_refusal(row))
        if row["stage"] == "finetune" and need.host["checkpoint_file"] and \
                row["requested"] * 2**20 < need.host_total * HOST_MARGIN:  # FSDP jobs
            where = f"models.{row['model']}.resources.finetune"
            raise ConfigError(
                f"config key {where}.mem_mb: value {row['mem_mb']}, and {row['job']} of model {row['model']!r} holds "
                f"{need.host_total / GIB:.1f} GiB on the host ({row['processes']} processes' own, "
                f"{need.host['processes'] / GIB:.0f} GiB, and one checkpoint file while rank 0 writes it, "
                f"{need.host['checkpoint_file'] / GIB:.1f} GiB): set it to "
                f"{math.ceil(need.host_total * HOST_MARGIN / 2**20 / 1000) * 1000} or more")


def _refusal(row: dict) -> str:
    from ..memory import GIB, card_margin

    need, gpu, model, key = row["need"], row["gpu"], row["model"], row["key"]
    terms = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.1f}" for k, v in need.terms.items() if v)
    size = f"{gpu.high / GIB:.1f} GiB" if gpu.exact else f"at most {gpu.high / GIB:.1f} GiB"
    lead = (f"{gpu.where}: {row['job']} of model {model!r} needs {need.device / GIB:.1f} GiB on each of its "
            f"{row['processes']} GPU(s) ({terms}")
    if row["stage"] == "finetune":
        resources = f"models.{model}.resources.finetune"
        return (f"{lead}; gradient checkpointing {'on' if row['checkpointing'] else 'off'}; "
                f"{card_margin()}), and each GPU has {size}: shard it over more GPUs ({key}.processes with "
                f"{resources}.gpu alike), lower {key}.batch_size or max_length, or train LoRA adapters "
                f"({key}.method: lora)")
    remedy = {
        "score": f"lower {key}.token_budget (padded tokens per batch) or {key}.max_length, or score with vLLM "
                 f"({key}.backend: vllm) over more GPUs (models.{model}.resources.score.gpu: tensor parallelism "
                 f"splits the weights)",
        "gradient": f"give the job a larger GPU, lower {key}.max_length, or leave the analysis out "
                    f"({key}.gradient: false)",
        "semantic": f"lower {key}.batch_size",
    }[row["stage"]]
    return f"{lead}; {card_margin()}), and each GPU has {size}: {remedy}"


def memory_rows(plan, model: str) -> list[dict]:
    """The model's fine-tune jobs, one row per distinct kind (a task's settings, each arm): what one of its
    processes needs of its device (`cuda`: a GPU) and what the job needs of the host (forgetmap.memory)."""
    from ..memory import fitted

    resources = plan.cfg["models"][model]["resources"]["finetune"]
    if not plan.finetuned[model]:
        return []
    cuda = resources["gpu"] > 0
    gpu = plan.gpu_memory(model, "finetune")
    kinds: dict[str, list] = {}  # one kind of fine-tune: [label, settings, arm, config key, tasks]
    for task in plan.finetuned[model]:
        settings = configured_finetune(plan, model, task)
        monitor = plan.forecast.monitor_settings(model, task)  # a forecast task's checks, as the job runs them
        settings = {**settings, "monitor": monitor} if monitor else settings
        label = "finetune, monitored" if monitor else "finetune"
        kind = kinds.setdefault(json.dumps({k: v for k, v in settings.items() if k != "seed"}, sort_keys=True),
                                [label, settings, None, f"models.{model}.finetune", []])
        kind[4].append(task)
    arm_tasks = plan.mitigation.tasks(model)
    for name, arm in plan.cfg["mitigation"]["arms"].items() if arm_tasks else ():
        kinds[f"arm {name}"] = [f"arm {name}", configured_finetune(plan, model, arm_tasks[0]), arm,
                                f"mitigation.arms.{name}", arm_tasks]
    rows = []
    shape = plan.base_shape(model)
    for label, settings, arm, key, tasks in kinds.values():
        more = len(tasks) > 1
        job = f"{label} ({len(tasks)} task{'s' if more else ''}: {tasks[0]}{', ...' if more else ''})"
        # checkpointing as the job decides it on the largest card the GPU's name allows (the only card, if exact)
        decided, need = fitted(shape, settings, cuda, gpu.high if gpu else None, arm)
        undecided = settings["gradient_checkpointing"] == "auto" and cuda and (gpu is None or gpu.exact is None)
        rows.append(_row(model, "finetune", job, key, need, gpu, cuda, processes=settings["processes"],
                         checkpointing="auto" if undecided else decided["gradient_checkpointing"],
                         mem_mb=resources["mem_mb"]))
        if "check" in need.phases:  # what its checks hold, said below its row
            rows[-1]["check"] = need.phases["check"]
    return rows


def _row(model: str, stage: str, job: str, key: str, need, gpu, cuda: bool = True, processes: int = 1,
         checkpointing="-", mem_mb=None, backend: str = "torch") -> dict:
    return {"model": model, "stage": stage, "job": job, "key": key, "need": need, "gpu": gpu, "cuda": cuda,
            "processes": processes, "checkpointing": checkpointing, "mem_mb": mem_mb, "backend": backend}


def inference_rows(plan, model: str) -> list[dict]:
    """The model's score, gradient- and semantic-similarity jobs that claim GPUs, one row each, sized by
    forgetmap.memory (planning reads no weights: the base's config, and MiniLM's)."""
    from .. import memory
    from ..engine import engine_need

    spec = plan.cfg["models"][model]
    resources = spec["resources"]
    rows = []
    if resources["score"]["gpu"]:
        score, key = spec["score"], f"models.{model}.score"
        dtype = "bfloat16" if score["dtype"] == "auto" else score["dtype"]
        if score["backend"] == "vllm":
            weights, cache = engine_need(plan.base_shape(model), dtype, _engine_length(plan, model),
                                         resources["score"]["gpu"])
            need = memory.Need({"weights": weights, "kv_cache": cache}, {})
            share = score["gpu_memory_utilization"]
            rows.append(_row(model, "score", f"score (vLLM: {share:g} of each GPU)", key, need,
                             plan.gpu_memory(model, "score"), processes=resources["score"]["gpu"],
                             backend="vllm"))
        else:
            # items' answers: generation, its batches sized by the key-value cache the GPU holds (on the smaller
            # of the cards a GPU model names: on a larger one its batches grow with the card)
            new_tokens = score["correctness"]["max_new_tokens"] if model in plan.item_models else 0
            gpu = plan.gpu_memory(model, "score")
            need = _traced(memory.score_need, plan.base_shape(model), dtype, score["token_budget"],
                           score["max_length"], new_tokens, gpu.low if gpu else None)
            rows.append(_row(model, "score", f"score (torch{', with generation' if new_tokens else ''})", key,
                             need, gpu))
    settings, key = spec["correlations"], f"models.{model}.correlations"
    if plan.task_correlations(model) and settings["gradient"] and resources["gradient"]["gpu"]:
        need = _traced(memory.gradient_need, plan.base_shape(model), settings["max_length"], settings["dim"])
        rows.append(_row(model, "gradient", "gradient similarity (one example)", key, need,
                         plan.gpu_memory(model, "gradient")))
    if plan.task_correlations(model) and settings["semantic"] and resources["semantic"]["gpu"]:
        from ..embed import minilm_path

        need = _traced(memory.embedding_need, minilm_path(), settings["batch_size"], 256)
        rows.append(_row(model, "semantic", "semantic similarity (MiniLM batch)", key, need,
                         plan.gpu_memory(model, "semantic")))
    return rows


def _traced(estimate, *args):
    """A job's traced memory (forgetmap.memory; a model's trace kept), or, where its architecture's forward cannot
    run on the meta device, why not (the job is then not checked; planning goes on)."""
    from .. import memory

    try:
        return memory.traced(estimate, *args) if isinstance(args[0], memory.Shape) else estimate(*args)
    except Exception as exc:  # an architecture's own code: any error it raises on meta tensors
        why = (str(exc).splitlines() or [""])[0][:80]
        return f"not traced on the meta device ({type(exc).__name__}: {why}): not checked"


def host_request(rows: list[dict]) -> int:
    """A fine-tune job's mem_mb from the estimate of its kinds (`memory_rows`), the largest: on GPUs its host
    memory, on a CPU the whole fine-tune and the process's own; 10 % added, in thousands of MB, at least 4,000."""
    from ..memory import HOST_MARGIN

    needs = [row["need"].host_total + (0 if row["cuda"] else row["need"].device) for row in rows]
    return max(4000, math.ceil(max(needs, default=0) * HOST_MARGIN / 2**20 / 1000) * 1000)


def configured_finetune(plan, model: str, task: str) -> dict:
    """A task's fine-tuning settings as configured (`gradient_checkpointing` not yet decided), without the
    config's `monitor` key: where a fine-tune is monitored, `Plan.forecast.monitor_settings` says how."""
    from .views import finetune_settings

    return {k: v for k, v in finetune_settings(plan.cfg, model, task).items() if k != "monitor"}


def _engine_length(plan, model: str) -> int:
    """The engine's max_model_len: the scored length and one token, within the model's positions."""
    from .. import anatomy

    spec = plan.cfg["models"][model]
    positions = anatomy.text(plan.base_json(model))["positions"] or spec["score"]["max_length"] + 1
    return min(spec["score"]["max_length"] + 1, positions)


def check_engine(plan, model: str) -> None:
    """A vLLM-scored model whose score GPUs' memory is known: the engine's weights and one max-length sequence's
    cache fit the share `score.gpu_memory_utilization` asks of each GPU (what the job checks again on the GPU
    it gets)."""
    from ..errors import ForgetmapError
    from ..engine import check_engine_fits

    spec = plan.cfg["models"][model]
    gpu = plan.gpu_memory(model, "score")
    if spec["score"]["backend"] != "vllm" or gpu is None:
        return
    dtype = "bfloat16" if spec["score"]["dtype"] == "auto" else spec["score"]["dtype"]
    where = gpu.describe().removeprefix("config key ")
    try:
        check_engine_fits(plan.base_shape(model), dtype, _engine_length(plan, model), spec["resources"]["score"]["gpu"],
                          spec["score"]["gpu_memory_utilization"], gpu.high, where)
    except ForgetmapError as exc:
        lead = "config key " if gpu.where.startswith("config key") else ""
        raise ConfigError(f"{lead}{exc}") from None


def memory_table(rows: list[dict]) -> str:
    """Every GPU job's memory, one line per kind of job; a job that fits only some of the cards a GPU model
    names is said below it."""
    from ..memory import GIB, on_card

    lines = ["forgetmap: memory of each job on GPUs (forgetmap.memory's estimate; docs/gpu.md)",
             f"  {'model':<14} {'job':<44} {'procs':>5} {'ckpt':>5} {'GPU GiB':>8} {'of GiB':>7} {'host GiB':>8} "
             f"{'mem_mb':>7}"]
    for row in rows:
        gpu = row["gpu"]
        if isinstance(row["need"], str):
            lines.append(f"  {row['model']:<14} {row['job'][:44]:<44} {row['processes']:>5}     -        ?  {row['need']}")
            continue
        size = "?" if gpu is None else f"{gpu.high / GIB:g}" if gpu.exact else f"{gpu.low / GIB:.0f}-{gpu.high / GIB:.0f}"
        checkpointing = {True: "on", False: "off"}.get(row["checkpointing"], str(row["checkpointing"]))
        host = f"{row['need'].host_total / GIB:>8.1f}" if row["stage"] == "finetune" else f"{'-':>8}"
        requested = "-" if row["stage"] != "finetune" else row["requested"]
        estimated = " (estimated)" if row["stage"] == "finetune" and row["mem_mb"] is None else ""
        lines.append(f"  {row['model']:<14} {row['job'][:44]:<44} {row['processes']:>5} {checkpointing:>5} "
                     f"{row['need'].device / GIB:>8.1f} {size:>7} {host} {requested:>7}{estimated}")
        if row.get("check") is not None:
            lines.append(f"    its monitor's checks (the probes scored between steps): {row['check'] / GIB:.1f} GiB")
        if gpu is not None and gpu.exact is None and on_card(row["need"].device) > gpu.low:
            lines.append(f"    fits a {gpu.high / GIB:.0f} GiB card, not a {gpu.low / GIB:.0f} GiB one: "
                         f"{gpu.where} names both; name the size (e.g. a100_80gb) or set "
                         f"models.{row['model']}.resources.{row['stage']}.gpu_memory_gib")
    return "\n".join(lines)
