"""The work each job of a plan does (forgetmap.cost.work), counted from its settings and its data, and the device it
runs on: the steps, batches and lengths a fine-tune trains on, the examples and items a scoring job scores and the
answers it generates, an arm's extra passes (its knob's values trained one after the other, replay's longer run, a
frozen reference's forward, every fine-tune judged on the held-out set as trained and at each interpolation), the
analyses' and the prediction jobs'. The lengths are the data's (forgetmap.cost.lengths).

`plan` is forgetmap.plan's Plan, read through its methods alone (this package imports neither it nor the config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..devices import cpu_name
from . import cards
from .figures import Device
from .lengths import Lengths
from .work import Work, forward_flops, multiplying_parameters

# all-MiniLM-L6-v2 (forgetmap.embed), the semantic job's encoder: the weights that multiply (its 30,522 x 384
# word embeddings are a lookup), its layers and width, its checkpoint's bytes, and the tokens it reads at most
MINILM = {"parameters": 10_800_000, "layers": 6, "hidden": 384, "bytes": 90_900_000, "max_length": 256}
# the count sketch's reading of each parameter's gradient, in the scorer's FLOPs (one example's projection at 135M
# parameters took as long as this many FLOPs per parameter at the scorer's rate: forgetmap.gradients)
PROJECTION_FLOPS = 360.0
# a full fine-tune's optimizer step (AdamW, clipping, zeroing) per weight, in the training loop's FLOPs: 2.4 s a step
# at 135M parameters on one thread of the 2-core AMD EPYC of 2026-12-02 (SmolLM2's fine-tunes of 3 steps); the
# calibration's model (about a million parameters: forgetmap.cost.harness.DEMO) holds its own in the seconds per pass
OPTIMIZER_FLOPS = 650.0
CALIBRATED_PARAMETERS = 1_000_000
# a prediction job's completions per entry of the matrix and seed, in the scorer's FLOPs (paper scale, 66 x 141,871,
# 10 seeds: about 4 s a (method, split) job on the 2-core Intel Xeon, benchmarks/prediction_scale.py)
PREDICT_FLOPS = 1500.0
# and what one costs besides (its modules' imports, its splits and files), in the same FLOPs: 0.45 s of a warm run's
# prediction job on the 2-core AMD EPYC of 2026-12-02 whatever its method (the demo's all_forgotten, mean)
PREDICT_FIXED_FLOPS = 1.4e10


@dataclass(frozen=True)
class Job:
    """One job of a kind: its work, its `benchmark:` file and its log (where a finished job's seconds and device
    are read)."""

    work: Work
    benchmark: str
    log: str


def device(plan, model: str, stage: str) -> Device:
    """The device a stage's jobs run on: its GPUs (the card the profile names, if any), else the CPU's threads."""
    resources = plan.cfg["models"][model]["resources"][stage]
    if not resources["gpu"]:
        if not plan.cluster:  # a local run's CPU is this machine's, whatever a profile names
            return Device("cpu", cpu_name(), resources["threads"])
        probed = plan.partition_probe()
        if plan.cpu_model or (probed and "failed" not in probed):  # the profile's, else the partition's probe job's
            return Device("cpu", plan.cpu_model or probed["machine"], resources["threads"])
        where = plan.cpu_probe_path()
        why = (f"partition {plan.cpu_partition}'s probe job could not run ({probed['failed']})" if probed else
               f"partition {plan.cpu_partition} not measured yet: its probe job ({where}) runs first" if where else
               "no partition's probe job planned")
        return Device("cpu", None, resources["threads"],
                      f"jobs run on the {plan.cluster} cluster's nodes, never probed from this machine; {why}")
    named = [cards.card(name) for name in plan.gpu_models.get(stage, {}).values()]
    if named and named[0]:
        return Device("gpu", named[0], resources["gpu"])
    gpu = plan.gpu_memory(model, stage) if stage != "base" else None
    low = gpu.low if gpu else 0
    why = (f"the slowest card of {low / 2**30:.1f} GiB or more: no GPU model named" if low else
           "the slowest card: no GPU model named")
    return Device("gpu", cards.slowest(low), resources["gpu"], why)


def examples_together(parameters: int, longest: int) -> int:
    """How many upstream examples the gradient job differentiates at once: forgetmap.gradients.together's count
    (tested equal), here without importing torch at planning."""
    room = (1 << 26) // (4 * max(1, parameters))  # gradients.GRADIENT_BYTES of float32 gradients
    return 1 if room < 2 else max(1, min(room, 2048 // max(1, longest)))  # gradients.BATCH_TOKENS


def task_mean_batches(lengths, parameters: int, room: int) -> list[tuple[int, int]]:
    """The batches the gradient job makes of a task's examples of `lengths` tokens for their mean gradient
    (forgetmap.gradients.mean_projection: by length, each of at most as many as fill `room` tokens), as (examples,
    longest) each: a backward over its padded tokens and every parameter's gradient projected once per batch."""
    out: list[tuple[int, int]] = []
    for length in sorted(int(n) for n in lengths):
        if out and out[-1][0] < max(examples_together(parameters, length), room // max(1, length)):
            out[-1] = (out[-1][0] + 1, length)
        else:
            out.append((1, length))
    return out


class Model:
    """A model's shape in the figures cost needs, and its work per kind of job."""

    def __init__(self, plan, model: str):
        self.plan, self.model = plan, model
        self.spec = plan.cfg["models"][model]
        shape = plan.base_shape(model)
        self.shape = shape
        self.parameters = multiplying_parameters(shape)
        self.weight_bytes = 4.0 * shape.parameters  # fp32 checkpoints, as the fine-tunes write them
        self.lengths = Lengths(plan, model)

    def fwd(self, length: float) -> float:
        return forward_flops(self.parameters, self.shape.layers, self.shape.hidden, length / 2)

    def upstream_length(self, max_length: int) -> float:
        shards = self.plan.shard_paths(self.model)
        template = self.spec["chat_template"]
        return self.lengths.mean(shards[0], max_length, template)

    def scoring(self, work: Work, examples: float, length: float, budget: int,
                batches: int | None = None) -> Work:
        """`examples` of mean `length` scored in `batches` (where not known: as few as the budget allows)."""
        tokens = examples * length
        if batches is None:
            batches = max(1, math.ceil(tokens / budget)) if examples else 0
        return work.add("score", tokens, self.fwd(length), batches)

    def training(self, work: Work, settings: dict, steps: int, length: float, path: str | None,
                 split: str | None = "train") -> Work:
        """One fine-tune's steps in one of its processes: forward and backward (x3), recomputed where checkpointed,
        LoRA's backward without weight gradients (x2), over its micro-batches' tokens with their padding (none
        where it packs) as the examples of `path` draw them."""
        passes = 2.0 if settings.get("method") == "lora" else 3.0
        passes += 1.0 if settings.get("gradient_checkpointing") is True else 0.0
        micro = settings.get("grad_accum", 1)
        padded = None if settings.get("packing") or path is None else self.lengths.step_tokens(
            path, settings["max_length"], settings.get("chat_template", self.spec["chat_template"]), split,
            settings["batch_size"], micro)
        tokens = steps * (padded if padded is not None else settings["batch_size"] * micro * length)
        work.add("train", tokens, passes * self.fwd(length), steps * micro)
        if settings.get("method") != "lora":  # the optimizer's step over every weight, beyond the calibration's
            work.flops["train"] += steps * OPTIMIZER_FLOPS * max(0, self.shape.parameters - CALIBRATED_PARAMETERS)
        return work

    def base(self) -> Work | None:
        settings = self.plan.base_settings(self.model)
        if settings["kind"] != "demo":
            return Work()  # a pointer: start-up only
        length = self.upstream_length(settings["max_length"])
        work = self.training(Work(), {**settings, "method": "full"}, settings["steps"], length,
                             self.plan.shard_paths(self.model)[0], None)
        evals = (settings["steps"] // settings["eval_every"] + 2) if settings["eval_every"] else 0
        work = self.scoring(work, evals * min(256, settings["n_examples"]), length, 16384)
        work.load_bytes = self.weight_bytes  # written once
        work.examples, work.setups["train"] = settings["n_examples"], 1
        return work

    def finetune(self, task: str, settings: dict, monitored: bool = True) -> Work:
        """A fine-tune of `task` under `settings`, with its monitor's checks where the task's fine-tune is monitored
        (`monitored`: an arm's fine-tune of the same task is not: Plan.arm_finetune_settings)."""
        from ..data.batches import planned_steps

        path = self.plan.task_paths(self.model).get(task)
        length = self.lengths.mean(path, settings["max_length"], settings["chat_template"], "train") if path \
            else float(settings["max_length"])
        examples = self._examples(path)
        steps = planned_steps(settings, examples) if examples else settings["steps"]
        work = self.training(Work(), settings, steps, length, path)
        monitor = self.plan.forecast.monitor_settings(self.model, task) if monitored else None
        if monitor:
            checks = steps // monitor["every"] + 2
            forecast = self.plan.cfg["forecast"]
            watched = forecast["k"] + forecast["audit"] + (monitor.get("items") or {}).get("k", 0)
            work = self.scoring(work, checks * watched, self.upstream_length(monitor["max_length"]),
                                monitor["token_budget"])
        work.load_bytes = 2 * self.weight_bytes  # the base read, the fine-tune written
        work.examples, work.setups["train"] = examples, 1
        return work

    def _examples(self, path: str | None, split: str = "train") -> int:
        if not path or not Path(path).exists():
            return 0
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["split"])
        return int(sum(1 for s in table.column("split").to_pylist() if s == split))

    def score(self, settings: dict, shard: int, cells: float = 1.0) -> Work:
        """One scoring job's work on a shard: every example, or where `cells` < 1 (a fractional map's run) that
        share of those that are not items (every item is scored under every run)."""
        path = self.plan.shard_paths(self.model)[shard]
        examples = self.plan.shards[self.plan.corpus(self.model)][shard]["count"]
        if cells < 1:
            mc, free, _ = self.lengths.items(path)
            examples = round(mc + free + cells * (examples - mc - free))
        return self.scored_file(settings, path, examples)

    def scored_file(self, settings: dict, path: str, examples: int, share: float = 1.0) -> Work:
        """One scoring job's work on `examples` upstream examples like those of `path` (a shard), whose items
        are the shard's `share`: the examples, their items' options and the answers generated, in the batches
        the scorer makes of them."""
        length = self.upstream_length(settings["max_length"])
        padding = settings["max_padding"]
        if padding is None:  # the scorer's default: batches of equal lengths on a CPU
            padding = 0.0 if device(self.plan, self.model, "score").kind == "cpu" else 0.1
        batches = self.lengths.batches(path, settings["max_length"], self.spec["chat_template"], examples,
                                       settings["token_budget"], padding, settings.get("packing", False))
        work = self.scoring(Work(), examples, length, settings["token_budget"], batches)
        mc, free, options = self.lengths.items(path)
        mc, free = mc * share, free * share
        if mc:  # each option scored after its question
            work = self.scoring(work, mc * options, length, settings["token_budget"])
        correctness = settings["correctness"]
        if free or correctness.get("answers") == "sampled":
            asked = (free + mc) if correctness.get("answers") == "sampled" else free
            answers = asked * (correctness.get("seeds") or 1)
            new = correctness["max_new_tokens"]
            rows = max(1, settings["token_budget"] // (settings["max_length"] + new))
            work.add("generate", answers * new, self.fwd(length + new), new * math.ceil(answers / rows))
        work.load_bytes = self.weight_bytes
        work.examples, work.setups["score"] = examples + mc + free, 1
        return work

    def _task_examples(self, limit: int) -> list[tuple[str, int]]:
        """Each fine-tuned task's training examples an analysis reads (at most `limit`), with its file."""
        paths = self.plan.task_paths(self.model)
        return [(paths.get(t), min(limit, self._examples(paths.get(t)) or limit))
                for t in self.plan.finetuned[self.model]]

    def semantic(self) -> Work:
        """MiniLM's forward over every upstream example and each task's training examples (forgetmap.correlate):
        texts at most its 256 tokens, in batches of `batch_size`."""
        settings = self.spec["correlations"]
        length = min(self.upstream_length(MINILM["max_length"]), MINILM["max_length"])
        texts = self.plan.n_upstream(self.model) + sum(n for _, n in self._task_examples(settings["max_task_examples"]))
        fwd = forward_flops(MINILM["parameters"], MINILM["layers"], MINILM["hidden"], length / 2)
        work = Work().add("score", texts * length, fwd, math.ceil(texts / settings["batch_size"]))
        work.load_bytes = MINILM["bytes"]
        work.examples, work.setups["score"] = texts, 1
        return work

    def gradient(self) -> Work:
        """Every upstream example's gradient, one backward each, projected by the count sketch (forgetmap.gradients),
        and each task's mean gradient: a backward per batch of its training examples, as the job batches them
        (`task_mean_batches`, their padding counted), each batch's gradient projected."""
        settings = self.spec["correlations"]
        length = self.upstream_length(settings["max_length"])
        examples = self.plan.n_upstream(self.model)
        batches = math.ceil(examples / examples_together(self.shape.parameters, int(length)))
        work = Work().add("train", examples * length, 3 * self.fwd(length), batches)
        work.add("score", examples, PROJECTION_FLOPS * self.parameters, 0)
        template = self.spec["chat_template"]
        tasks = self._task_examples(settings["max_task_examples"])
        for path, n in tasks:
            sample = self.lengths.sample(path, settings["max_length"], template, "train") if path else None
            if sample is None:  # not measurable yet: at max_length
                self.lengths.bounded = True
                sample = np.array([settings["max_length"]])
            lengths = np.resize(sample, n)
            made = task_mean_batches(lengths, self.shape.parameters, max(settings["max_length"], int(lengths.max())))
            padded = sum(size * longest for size, longest in made)
            work.add("train", padded, 3 * self.fwd(padded / n), len(made))
            work.add("score", len(made), PROJECTION_FLOPS * self.parameters, 0)
        work.load_bytes = self.weight_bytes
        work.examples, work.setups["score"] = examples + sum(n for _, n in tasks), 1
        return work

    def prediction(self) -> Work:
        """A (split, method) prediction job: the matrix read, and each seed's completions over its entries."""
        entries = len(self.plan.finetuned[self.model]) * self.plan.n_upstream(self.model)
        work = Work().add("score", entries * self.plan.cfg["prediction"]["seeds"], PREDICT_FLOPS, 0)
        work.add("score", 1, PREDICT_FIXED_FLOPS, 0)
        work.load_bytes = 4.0 * entries
        work.setups["score"] = 1
        return work

    def task_scoring(self, task: str, settings: dict, split: str | None) -> Work:
        """A task's examples scored by the base (the token losses of a token-masking arm)."""
        path = self.plan.task_paths(self.model).get(task)
        length = self.lengths.mean(path, settings["max_length"], settings.get("chat_template", "auto"), split)
        n = self._examples(path) if split == "train" else 0
        work = self.scoring(Work(), n or 1, length, settings.get("token_budget", 16384))
        work.load_bytes = self.weight_bytes
        work.examples, work.setups["score"] = n, 1
        return work

    def judging(self, work: Work, task: str) -> Work:
        """A fine-tune judged as trained and at each interpolation toward the base (forgetmap.mitigation.evaluate):
        each variant loaded beside the base for its task's validation NLL and KL, written where interpolated, and
        its held-out examples and their items scored as a scoring job scores them."""
        path = self.plan.task_paths(self.model).get(task)
        finetune = self.plan.finetune_settings(self.model, task)
        validation = self._examples(path, "validation")
        heldout = self.plan.cfg["mitigation"]["heldout"] or 0
        shard = self.plan.shards[self.plan.corpus(self.model)][0]["count"]
        alphas = self.plan.mitigation.alphas(self.model)
        work = work + Work(load_bytes=self.weight_bytes, examples=validation)  # the base, its validation
        length = self.lengths.mean(path, finetune["max_length"], finetune["chat_template"], "validation") if path \
            else float(finetune["max_length"])
        variant = self.scored_file(self.plan.score_settings(self.model), self.plan.shard_paths(self.model)[0],
                                   heldout, heldout / max(shard, 1))
        variant = self.scoring(variant, 2 * validation, length, 16 * finetune["max_length"],
                               2 * math.ceil(validation / 16))  # the variant's and the base's forwards
        for alpha in (1.0, *alphas):  # loaded twice; an interpolation also written
            variant.load_bytes = self.weight_bytes * (2 if alpha == 1.0 else 4)
            work = work + variant
        return work

    def plain(self, task: str) -> Work:
        """Plain fine-tuning's checkpoint judged (`plain_scores`): no training."""
        return self.judging(Work(), task)

    def arm(self, name: str, arm: dict, task: str) -> Work:
        """An arm's job: its fine-tune for each value of its knob (replay's longer run, a frozen reference's
        forward), each judged on the held-out set as trained and at each interpolation."""
        from ..mitigation.knobs import swept

        settings = self.plan.arm_finetune_settings(self.model, task, arm)
        _, values = swept(arm)
        stretch = 1.0 + (arm.get("ratio") or 0.0) if arm.get("replay") else 1.0
        one = self.finetune(task, {**settings, "steps": math.ceil(settings["steps"] * stretch)}, monitored=False)
        if arm.get("kl"):  # the frozen base's forward on every trained token
            one.add("score", one.tokens["train"], self.fwd(settings["max_length"]), one.passes["train"])
        trained = Work(flops=dict(one.flops), passes=dict(one.passes), tokens=dict(one.tokens))
        work = Work(load_bytes=one.load_bytes, examples=one.examples, setups=dict(one.setups))
        for _ in values:  # a fine-tune per value, in the job's one process; each judged
            work = self.judging(work + trained, task)
        return work


def kinds(plan, model: str, m: Model | None = None) -> list[tuple[str, str, list[Job]]]:
    """The model's jobs by kind, each kind's stage, label and jobs: base, fine-tunes, score jobs, token losses,
    arms, prediction jobs, and the semantic and gradient analyses (their work counted by `m`, a Model of
    `model`)."""
    m = m or Model(plan, model)

    def job(work: Work, name: str, **where) -> Job:  # a job of `name`'s benchmark and log templates
        return Job(work, *plan.job_record(name, model, **where))

    base = "base model" if plan.base_settings(model)["kind"] == "demo" else "base model (a pointer)"
    out = [("base", base, [job(m.base(), "BASE")])]
    finetunes = {}
    for task in plan.finetuned[model]:
        label = "finetune, monitored" if plan.forecast.monitor_settings(model, task) is not None else "finetune"
        finetunes.setdefault(label, []).append(job(m.finetune(task, plan.finetune_settings(model, task)), "FINETUNE",
                                                   task=task))
    out += [("finetune", label, jobs) for label, jobs in finetunes.items()]
    fractional = plan.fractional_rows(model)
    scored = [r for r in plan.runs(model) if r not in plan.logged[model] and r not in fractional]
    scoring = plan.score_settings(model)
    shards = len(plan.shard_paths(model))
    cells = plan.cfg["models"][model]["score"]["cells"]
    for shard in range(shards):
        label = f"score shard {shard}" if shards > 1 else "score"
        out.append(("score", label, [job(m.score(scoring, shard), "SCORE", run=r, shard=shard) for r in scored]))
        if fractional:  # a fractional map's runs: their cells only (its time table shows the saving)
            work = m.score(scoring, shard, cells)
            out.append(("score", f"{label}, {100 * cells:g} % of cells",
                        [job(work, "SCORE_CELLS", run=r, shard=shard, cells=plan.cells_key(model, r))
                         for r in fractional]))
    arm_tasks = plan.mitigation.tasks(model)
    if arm_tasks:
        arms = plan.cfg["mitigation"]["arms"]
        if any(arm.get("tokens") for arm in arms.values()):
            out.append(("score", "token losses", [
                job(m.task_scoring(t, {**scoring, **plan.mitigation.token_loss_settings(model, t)}, "train"),
                    "TOKEN_LOSSES", task=t) for t in arm_tasks]))
        out.append(("score", "plain fine-tune judged", [job(m.plain(t), "PLAIN", task=t) for t in arm_tasks]))
        for name, arm in arms.items():
            out.append(("finetune", f"arm {name}", [job(work, "ARM", arm=name, seed=seed, task=task)
                                                    for task in arm_tasks for work in [m.arm(name, arm, task)]
                                                    for seed in plan.cfg["mitigation"]["seeds"]]))
    splits, methods = plan.prediction.splits(model), plan.prediction.methods(model)
    if splits and methods:
        work = m.prediction()
        out.append(("analysis", "predict", [job(work, "PREDICT", split=s, method=k) for s in splits for k in methods]))
    if plan.task_correlations(model):
        settings = plan.cfg["models"][model]["correlations"]
        for stage, make in (("semantic", m.semantic), ("gradient", m.gradient)):
            if settings[stage]:
                out.append((stage, f"{stage} similarity", [job(make(), stage.upper())]))
    return out


def starts_warm(plan, stage: str) -> bool:
    """Whether a stage's jobs are forked from the run's warm server (forgetmap.warm): a local run's, but for the
    base, the run's first job, which starts before the server has done importing, in its own process."""
    from ..warm import wanted

    return wanted(plan) and stage != "base"
