"""Before any job runs: can what the config points at serve the run? Each failure names the config key.

`resolve` checks the config itself and the plan finds the base model's files; this checks what only
loading them shows, once, in the Snakemake process that plans the run:
- a pretrained base's tokenizer is usable (a real vocabulary and an EOS; transformers builds a
  two-token tokenizer for a directory without tokenizer files, and fine-tunes on it learn only EOS);
- the chat template exists where the config asks for the tokenizer's own, and renders a response
  verbatim (the scored span is found in the rendered text);
- LoRA `target_modules` name modules the architecture has (read from its config, no weights loaded);
- on a local run, no rule asks for more GPUs than the machine has (a job would wait on a lock or fail);
- every fine-tune on GPUs fits them, by forgetmap.memory's estimate, where their memory is configured, and
  its host memory request holds its processes and the checkpoint file being written; the estimates are
  printed as a table.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ConfigError
from .checks import about

GPU_STAGES = ("base", "finetune", "score", "semantic", "gradient")  # resources whose `gpu` a rule declares


def check(plan) -> None:
    """The base models' checks, and the mitigation arms' against the architecture (the Snakefile runs
    `check_gpus` when a local run starts: a dry run or a cluster run needs no GPU here)."""
    for model, files in plan.base_files.items():
        check_base(plan, model, Path(files["local"]))
    for model in plan.computed:
        if plan.mitigation.tasks(model):
            check_arena(plan, model)
    check_memory(plan)


def architecture(plan, model: str):
    """The base model's architecture on the meta device (no weights): from its config (a pretrained base)
    or from `models.NAME.base.architecture` (the demo's)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(plan.base_config(model))


def check_arena(plan, model: str) -> None:
    """Every arena knob fits the architecture: no more trained blocks than it has, no LoRA rank above its
    hidden size, module names it has (`train_modules`, an arm's `lora.target_modules`), generations shorter
    than its positions."""
    from ..mitigation.freezing import blocks, module_names
    from ..mitigation.knobs import generates, knob_values
    from ..models import matching_modules

    arms = {name: spec for name, spec in plan.cfg["mitigation"]["arms"].items()
            if any(spec.get(k) for k in ("train_top", "train_modules", "lora")) or generates(spec)}
    if not arms:
        return
    net = architecture(plan, model)
    where = f"the base of model {model!r} ({type(net).__name__})"
    for name, spec in arms.items():
        key = f"config key mitigation.arms.{name}"
        tops = knob_values(spec, "train_top")
        if tops and max(tops) > len(blocks(net)):
            raise ConfigError(f"{key}.train_top: value {spec['train_top']}: {where} has {len(blocks(net))} "
                              f"transformer blocks")
        ranks = knob_values(spec, "lora.r")
        hidden = getattr(net.config, "hidden_size", None)
        if ranks and hidden and max(ranks) > hidden:
            raise ConfigError(f"{key}.lora.r: value {spec['lora']['r']}: above the hidden size of {where}, {hidden}")
        positions = getattr(net.config, "max_position_embeddings", None)
        if generates(spec) and positions and spec["generation"]["max_new_tokens"] >= positions:
            raise ConfigError(f"{key}.generation.max_new_tokens: value {spec['generation']['max_new_tokens']}: "
                              f"{where} has {positions} positions, and a generated text needs its prompt beside it")
        for sub, names in (("train_modules", spec.get("train_modules")),
                           ("lora.target_modules", (spec.get("lora") or {}).get("target_modules"))):
            missing = [t for t, found in matching_modules(net, names or []).items() if not found]
            if missing:
                raise ConfigError(f"{key}.{sub}: {', '.join(missing)} not in {where}; its modules: "
                                  f"{', '.join(module_names(net))}")


def check_base(plan, model: str, directory: Path) -> None:
    from ..data.chat import chat_pieces, template_in_use
    from ..models import check_tokenizer
    from ..pretrained import has_tokenizer_files, target_modules_missing

    spec = plan.cfg["models"][model]
    key = f"models.{model}.base.path"
    if not has_tokenizer_files(directory):
        raise ConfigError(f"config key {key}: {directory} has no tokenizer files (tokenizer.json, tokenizer.model or "
                          f"vocab.json); save the model's tokenizer there with tokenizer.save_pretrained")
    tokenizer = _tokenizer(directory, key)
    with about(key):
        check_tokenizer(tokenizer, directory)
    template = spec["chat_template"]
    if template == "tokenizer" and not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"config key models.{model}.chat_template: 'tokenizer', but the tokenizer of {directory} has "
                          f"no chat template; use 'olmo' (the paper's format) or 'auto' (the tokenizer's own where it "
                          f"has one)")
    try:
        chat_pieces(tokenizer, "Is this a prompt?", "It is the response.", template)
    except Exception as exc:  # a template that fails to render or hides the response: the job would fail alike
        raise ConfigError(f"config key models.{model}.chat_template: the tokenizer's chat template "
                          f"({template_in_use(tokenizer, template)}) cannot render a prompt and response: {exc}") from None
    checked: dict[tuple, tuple] = {}  # the architecture is built once per distinct target list, not per task
    for task in plan.finetuned[model]:  # measured or only forecast: every task is fine-tuned
        settings = plan.finetune_settings(model, task)
        if settings["method"] != "lora":
            continue
        targets = tuple(settings["lora"]["target_modules"])
        if targets not in checked:
            checked[targets] = target_modules_missing(directory, list(targets))
        missing, linear = checked[targets]
        if missing:
            overridden = "lora" in (plan.cfg["tasks"][task]["finetune"] or {})
            where = f"tasks.{task}.finetune" if overridden else f"models.{model}.finetune"
            raise ConfigError(f"config key {where}.lora.target_modules: {', '.join(missing)} not in the architecture "
                              f"of {directory} ({type_name(directory)}); its linear layers: {', '.join(linear)}")


def _tokenizer(directory: Path, key: str):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds for a broken tokenizer
        raise ConfigError(f"config key {key}: the tokenizer of {directory} cannot be loaded: {exc}") from None


def type_name(directory: Path) -> str:
    import json

    config = json.loads((Path(directory) / "config.json").read_text())
    return ", ".join(config.get("architectures") or [config.get("model_type", "unknown")])


def check_gpus(plan) -> None:
    """No rule of a local run asks for more GPUs than the machine has (forgetmap.devices counts them)."""
    from ..devices import device_count

    available = device_count()
    for model in plan.computed:
        spec = plan.cfg["models"][model]
        used = [s for s in GPU_STAGES if (s not in ("semantic", "gradient")
                                          or (spec["correlations"][s] and plan.task_correlations(model)))
                and (s != "finetune" or plan.finetuned[model])]  # a map of checkpoints fine-tunes nothing
        for stage in used:
            gpus = spec["resources"][stage]["gpu"]
            if stage == "base" and spec["base"]["kind"] == "pretrained":
                continue  # a pointer to the weights: its job never touches a GPU
            if gpus > available:
                raise ConfigError(f"config key models.{model}.resources.{stage}.gpu: value {gpus}, but this machine has "
                                  f"{available} GPU(s) and the run is local; set it to 0 to run on the CPU, or submit "
                                  f"to a cluster (--profile profiles/slurm)")


def memory_rows(plan, model: str) -> list[dict]:
    """The model's fine-tune jobs, one row per distinct kind (a task's settings, each arm): what one of its
    processes needs of its device (`cuda`: a GPU) and what the job needs of the host (forgetmap.memory)."""
    import json

    from ..memory import GIB, fitted

    spec = plan.cfg["models"][model]
    resources = spec["resources"]["finetune"]
    if not plan.finetuned[model]:
        return []
    cuda = resources["gpu"] > 0
    gpu = resources["gpu_memory_gib"] * GIB if resources["gpu_memory_gib"] is not None and cuda else None
    kinds: dict[str, list] = {}  # one kind of fine-tune: [label, settings, arm, config key, tasks]
    for task in plan.finetuned[model]:
        settings = configured_finetune(plan, model, task)
        kind = kinds.setdefault(json.dumps({k: v for k, v in settings.items() if k != "seed"}, sort_keys=True),
                                ["finetune", settings, None, f"models.{model}.finetune", []])
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
        decided, need = fitted(shape, settings, cuda, gpu, arm)
        undecided = settings["gradient_checkpointing"] == "auto" and cuda and gpu is None  # the job decides
        rows.append({"model": model, "job": job, "key": key, "processes": settings["processes"],
                     "checkpointing": "auto" if undecided else decided["gradient_checkpointing"], "need": need,
                     "gpu": gpu, "cuda": cuda, "mem_mb": resources["mem_mb"]})
    return rows


def host_request(rows: list[dict]) -> int:
    """A fine-tune job's mem_mb from the estimate of its kinds (`memory_rows`), the largest: on GPUs its host
    memory, on a CPU the whole fine-tune and the process's own; 10 % added, in thousands of MB, at least 4,000."""
    from ..memory import OVERHEAD

    needs = [row["need"].host_total + (0 if row["cuda"] else row["need"].device) for row in rows]
    return max(4000, math.ceil(max(needs, default=0) * OVERHEAD / 2**20 / 1000) * 1000)


def configured_finetune(plan, model: str, task: str) -> dict:
    """A task's fine-tuning settings as configured (`gradient_checkpointing` not yet decided)."""
    from .views import finetune_settings

    return finetune_settings(plan.cfg, model, task)


def check_memory(plan) -> None:
    """Each GPU fine-tune (and arm) fits the configured GPU memory and host memory; the table goes to the
    run's log (stderr) for every model whose fine-tunes claim GPUs."""
    import sys

    from ..memory import GIB, OVERHEAD

    rows = [{**row, "requested": plan.resource(model, "finetune", "mem_mb")}
            for model in plan.computed for row in plan.finetune_memory(model) if row["cuda"]]
    if rows:
        print(memory_table(rows), file=sys.stderr)
    for row in rows:
        need, model = row["need"], row["model"]
        where = f"models.{model}.resources.finetune"
        if row["gpu"] is not None and need.device * OVERHEAD > row["gpu"]:
            terms = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.1f}" for k, v in need.terms.items() if v)
            raise ConfigError(
                f"config key {where}.gpu_memory_gib: {row['job']} of model {model!r} needs {need.device / GIB:.1f} GiB "
                f"on each of its {row['processes']} GPU(s) ({terms}; gradient checkpointing "
                f"{'on' if row['checkpointing'] else 'off'}; with {OVERHEAD:g}x for the allocator), and each GPU has "
                f"{row['gpu'] / GIB:g} GiB: shard it over more GPUs ({row['key']}.processes with {where}.gpu alike), "
                f"lower {row['key']}.batch_size or max_length, or train LoRA adapters ({row['key']}.method: lora)")
        if need.host["checkpoint_file"] and row["requested"] * 2**20 < need.host_total * OVERHEAD:  # FSDP jobs
            raise ConfigError(
                f"config key {where}.mem_mb: value {row['mem_mb']}, and {row['job']} of model {model!r} holds "
                f"{need.host_total / GIB:.1f} GiB on the host ({row['processes']} processes' own, "
                f"{need.host['processes'] / GIB:.0f} GiB, and one checkpoint file while rank 0 writes it, "
                f"{need.host['checkpoint_file'] / GIB:.1f} GiB): set it to "
                f"{math.ceil(need.host_total * OVERHEAD / 2**20 / 1000) * 1000} or more")
    for model in plan.computed:
        check_engine(plan, model)


def check_engine(plan, model: str) -> None:
    """A vLLM-scored model whose score jobs' GPU memory is configured: the engine's weights and one
    max-length sequence's cache fit the share `score.gpu_memory_utilization` asks of each GPU (what the job
    checks again on the GPU it gets)."""
    from ..errors import ForgetmapError
    from ..memory import GIB, check_engine_fits

    spec = plan.cfg["models"][model]
    resources = spec["resources"]["score"]
    if spec["score"]["backend"] != "vllm" or not resources["gpu"] or resources["gpu_memory_gib"] is None:
        return
    config = plan.base_config(model).get_text_config()
    positions = getattr(config, "max_position_embeddings", None) or spec["score"]["max_length"] + 1
    max_model_len = min(spec["score"]["max_length"] + 1, positions)
    dtype = "bfloat16" if spec["score"]["dtype"] == "auto" else spec["score"]["dtype"]
    try:
        check_engine_fits(plan.base_shape(model), dtype, max_model_len, resources["gpu"],
                          spec["score"]["gpu_memory_utilization"], resources["gpu_memory_gib"] * GIB,
                          f"models.{model}.resources.score.gpu_memory_gib ({resources['gpu_memory_gib']:g} GiB)")
    except ForgetmapError as exc:
        raise ConfigError(f"config key {exc}") from None


def memory_table(rows: list[dict]) -> str:
    """The fine-tunes' memory, one line per job kind."""
    from ..memory import GIB

    lines = ["forgetmap: memory of each fine-tune on GPUs (forgetmap.memory's estimate; docs/gpu.md)",
             f"  {'model':<14} {'job':<44} {'procs':>5} {'ckpt':>5} {'GPU GiB':>8} {'of GiB':>7} {'host GiB':>8} "
             f"{'mem_mb':>7}"]
    for row in rows:
        gpu = f"{row['gpu'] / GIB:g}" if row["gpu"] is not None else "?"
        checkpointing = {True: "on", False: "off"}.get(row["checkpointing"], str(row["checkpointing"]))
        lines.append(f"  {row['model']:<14} {row['job'][:44]:<44} {row['processes']:>5} {checkpointing:>5} "
                     f"{row['need'].device / GIB:>8.1f} {gpu:>7} {row['need'].host_total / GIB:>8.1f} "
                     f"{row['requested']:>7}{'' if row['mem_mb'] is not None else ' (estimated)'}")
    return "\n".join(lines)
