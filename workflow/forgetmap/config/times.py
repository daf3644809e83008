"""How long each job of the plan takes, and what the whole plan costs, before any job is submitted.

Each model job's work (forgetmap.cost.Work) is counted from its settings and its data: the steps, batches and
lengths a fine-tune trains on, the examples and items a score job scores and the answers it generates, an
arm's extra passes (its knob's values trained one after the other, replay's longer run, a frozen reference's
forward, every fine-tune judged on the held-out set as trained and at each interpolation). The lengths are the
data's, tokenized as the jobs tokenize them, where the data and the base's tokenizer exist; before they do, every
example is taken at its `max_length` (an upper bound, said in the table). Its time is forgetmap.cost's from the
rates measured on its device kind.

The table goes to the run's log beside the memory table (a dry run prints it): one line per kind of job, its
count, the time of one, the total, and the plan's device-hours by kind of GPU and its CPU-hours. Where a
config leaves a stage's `runtime` unset, a job's SLURM time is the longest estimate of its stage's jobs with
forgetmap.cost's margin.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import cost
from ..devices import cpu_name, usable_cpus

SAMPLE = 256  # examples tokenized to measure a file's mean length
# the jobs whose resources are each stage's (rules/common.smk's STAGE_RULES): their estimate sets the stage's runtime
TIMED_STAGES = ("base", "finetune", "score", "semantic", "gradient")
# all-MiniLM-L6-v2 (forgetmap.embed), the semantic job's encoder: the weights that multiply (its 30,522 x 384
# word embeddings are a lookup), its layers and width, its checkpoint's bytes, and the tokens it reads at most
MINILM = {"parameters": 10_800_000, "layers": 6, "hidden": 384, "bytes": 90_900_000, "max_length": 256}
# the count sketch's reading of each parameter's gradient, in the scorer's FLOPs (one example's projection at 135M
# parameters took as long as this many FLOPs per parameter at the scorer's rate: forgetmap.gradients)
PROJECTION_FLOPS = 360.0
# a full fine-tune's optimizer step (AdamW, clipping, zeroing) per weight, in the training loop's FLOPs: 2.4 s a step
# at 135M parameters on one thread of the 2-core AMD EPYC of 2026-12-02 (SmolLM2's fine-tunes of 3 steps); the
# calibration's model (about a million parameters: forgetmap.calibrate.DEMO) holds its own in the seconds per pass
OPTIMIZER_FLOPS = 650.0
CALIBRATED_PARAMETERS = 1_000_000
# a prediction job's completions per entry of the matrix and seed, in the scorer's FLOPs (paper scale, 66 x 141,871,
# 10 seeds: about 4 s a (method, split) job on the 2-core Intel Xeon, benchmarks/prediction_scale.py)
PREDICT_FLOPS = 1500.0
# and what one costs besides (its modules' imports, its splits and files), in the same FLOPs: 0.45 s of a warm run's
# prediction job on the 2-core AMD EPYC of 2026-12-02 whatever its method (the demo's all_forgotten, mean)
PREDICT_FIXED_FLOPS = 1.4e10


@dataclass
class JobTime:
    """One kind of job of a model: how many, its device, its work, the seconds of one and where they come from."""

    model: str
    stage: str
    job: str
    count: int
    device: cost.Device
    work: cost.Work
    seconds: float  # as the run goes: forked from a warm server where a local run has one (forgetmap.warm)
    figures: cost.Figures
    lengths: str  # "measured" or "at most max_length"
    cold_seconds: float  # in a process of its own (a cluster job): what its SLURM time is sized on
    jobs: tuple = ()  # each job of the kind (Job): where a finished one's time is read
    learned: str | None = None  # how the run's finished jobs changed the estimate (forgetmap.config.learned)


@dataclass(frozen=True)
class Job:
    """One job of a kind: its work, its `benchmark:` file and its log (where a finished job's seconds and device
    are read)."""

    work: cost.Work
    benchmark: str
    log: str


class Lengths:
    """Mean tokens of a model's examples, tokenized as its jobs tokenize them, read once per file."""

    def __init__(self, plan, model: str):
        self.plan, self.model = plan, model
        self._tokenizer = False  # not yet looked for
        self._samples: dict = {}
        self._frames: dict = {}  # data files not written yet, as their jobs will write them
        self.bounded = False  # some length was taken at its max_length

    def tokenizer(self):
        if self._tokenizer is False:
            self._tokenizer = None
            base = Path(self.plan.checkpoint(self.model, "base"))
            local = self.plan.base_files.get(self.model, {}).get("local")
            if not base.exists() and local:  # a pretrained base's own files, found at planning
                base = Path(local)
            if base.is_dir() and any(base.glob("tokenizer*")) or (base / "base.json").exists():
                try:
                    from ..models import load_tokenizer

                    self._tokenizer = load_tokenizer(base)
                except Exception:  # a pointer to weights not yet downloaded: the lengths are bounded instead
                    self._tokenizer = None
        return self._tokenizer

    def mean(self, path: str, max_length: int, template: str, split: str | None = None) -> float:
        """Mean tokens of the examples in `path` (a shard or a task file), at most `max_length`."""
        sample = self.sample(path, max_length, template, split)
        if sample is None:
            self.bounded = True
            return float(max_length)
        return float(sample.mean())

    def batches(self, path: str, max_length: int, template: str, count: int, budget: int, max_padding: float,
                packing: bool) -> int | None:
        """The batches the scorer makes of `count` examples like the sample of `path` (forgetmap.nll's plan: on
        a CPU batches of equal lengths, so one per length and budget), or None where the lengths are not known."""
        sample = self.sample(path, max_length, template)
        if sample is None or not count:
            return None
        from ..data.batches import length_batches
        from ..packing import packed_batches

        lengths = np.resize(sample, int(count))  # the sample's lengths repeated to the file's count
        return len(packed_batches(lengths, budget) if packing else length_batches(lengths, budget, max_padding))

    def step_tokens(self, path: str, max_length: int, template: str, split: str | None, batch: int,
                    micro: int) -> float | None:
        """The tokens one optimizer step computes, padding included: `micro` micro-batches of `batch` examples
        drawn at random, each padded to its longest (the step's examples sorted by length first where there are
        several micro-batches, as forgetmap.data.batches draws them); None where the lengths are not known."""
        sample = self.sample(path, max_length, template, split)
        if sample is None:
            return None
        rng = np.random.default_rng(0)
        drawn = np.sort(rng.choice(sample, size=(64, micro, batch)).reshape(64, -1), axis=1) if micro > 1 \
            else rng.choice(sample, size=(64, batch))
        return float(drawn.reshape(64, micro, batch).max(axis=2).sum(axis=1).mean() * batch)

    def sample(self, path: str, max_length: int, template: str, split: str | None = None):
        """The tokens of up to SAMPLE examples of `path` (an array), or None where they cannot be measured yet."""
        key = (path, max_length, split)
        if key not in self._samples:
            self._samples[key] = self._measure(path, max_length, template, split)
        return self._samples[key]

    def _measure(self, path: str, max_length: int, template: str, split: str | None):
        tokenizer = self.tokenizer()
        frame = self.frame(path) if tokenizer is not None else None
        if frame is None:
            return None
        from ..data.chat import encode_examples

        if split is not None and "split" in frame:
            frame = frame[frame["split"] == split]
        if "kind" not in frame:  # a task: prompt and response, as a fine-tune renders them
            frame = frame.assign(kind="chat", text="")
        frame = frame.iloc[:SAMPLE] if len(frame) <= SAMPLE else frame.sample(SAMPLE, random_state=0)
        if frame.empty:
            return None
        try:
            encoded = encode_examples(tokenizer, frame, template, max_length)
        except Exception:  # a template the tokenizer lacks is the preflight's to name; here the length is bounded
            return None
        return np.array([len(e.ids) for e in encoded], dtype=np.int64)

    def frame(self, path: str):
        """A data file's rows: read where it exists, else as its job will write them where that is cheap to know
        (forgetmap.plan's `planned_data`: the demo's generators, a local file's rows), else None."""
        if Path(path).exists():
            import pandas as pd

            return pd.read_parquet(path)
        if path not in self._frames:
            self._frames[path] = self.plan.planned_data(path)
        return self._frames[path]

    def items(self, path: str) -> tuple[int, int, float]:
        """A shard's items: (multiple-choice, free-form, mean options of the multiple-choice ones); what is not
        known yet, none."""
        if Path(path).exists():
            import pyarrow.parquet as pq

            names = pq.ParquetFile(path).schema_arrow.names
            if "answer" not in names:
                return 0, 0, 0.0
            table = pq.read_table(path, columns=[c for c in ("answer", "choices") if c in names]).to_pandas()
        else:
            table = self.frame(path)
            if table is None or "answer" not in table:
                return 0, 0, 0.0
        answered = table["answer"].notna()
        if "choices" not in table:
            return 0, int(answered.sum()), 0.0
        options = table["choices"].map(lambda c: len(c) if c is not None and not isinstance(c, float) else 0)
        mc = answered & (options > 0)
        return int(mc.sum()), int((answered & ~mc).sum()), float(options[mc].mean()) if mc.any() else 0.0


def device(plan, model: str, stage: str) -> cost.Device:
    """The device a stage's jobs run on: its GPUs (the card the profile names, if any), else the CPU's threads."""
    resources = plan.cfg["models"][model]["resources"][stage]
    if not resources["gpu"]:
        if not plan.cluster or plan.cpu_model:  # (a local run's CPU is this machine's, whatever a profile names)
            return cost.Device("cpu", plan.cpu_model if plan.cluster else cpu_name(), resources["threads"])
        return cost.Device("cpu", None, resources["threads"],
                           f"jobs run on the {plan.cluster} cluster's nodes, never probed from this machine: name "
                           f"their CPU (the profile's cpu_model) once `forgetmap calibrate` has measured it there")
    from ..gpu_models import card

    named = [card(name) for name in plan.gpu_models.get(stage, {}).values()]
    if named and named[0]:
        return cost.Device("gpu", named[0], resources["gpu"])
    gpu = plan.gpu_memory(model, stage) if stage != "base" else None
    low = gpu.low if gpu else 0
    why = (f"the slowest card of {low / 2**30:.1f} GiB or more: no GPU model named" if low else
           "the slowest card: no GPU model named")
    return cost.Device("gpu", cost.slowest_card(low), resources["gpu"], why)


def examples_together(parameters: int, longest: int) -> int:
    """How many upstream examples the gradient job differentiates at once: forgetmap.gradients.together's count
    (tested equal), here without importing torch at planning."""
    room = (1 << 26) // (4 * max(1, parameters))  # gradients.GRADIENT_BYTES of float32 gradients
    return 1 if room < 2 else max(1, min(room, 2048 // max(1, longest)))  # gradients.BATCH_TOKENS


class Model:
    """A model's shape in the figures cost needs, and its work per kind of job."""

    def __init__(self, plan, model: str):
        self.plan, self.model = plan, model
        self.spec = plan.cfg["models"][model]
        shape = plan.base_shape(model)
        self.shape = shape
        self.parameters = cost.multiplying_parameters(shape)
        self.weight_bytes = 4.0 * shape.parameters  # fp32 checkpoints, as the fine-tunes write them
        self.lengths = Lengths(plan, model)

    def fwd(self, length: float) -> float:
        return cost.forward_flops(self.parameters, self.shape.layers, self.shape.hidden, length / 2)

    def upstream_length(self, max_length: int) -> float:
        shards = self.plan.shard_paths(self.model)
        template = self.spec["chat_template"]
        return self.lengths.mean(shards[0], max_length, template)

    def scoring(self, work: cost.Work, examples: float, length: float, budget: int,
                batches: int | None = None) -> cost.Work:
        """`examples` of mean `length` scored in `batches` (where not known: as few as the budget allows)."""
        tokens = examples * length
        if batches is None:
            batches = max(1, math.ceil(tokens / budget)) if examples else 0
        return work.add("score", tokens, self.fwd(length), batches)

    def training(self, work: cost.Work, settings: dict, steps: int, length: float, path: str | None,
                 split: str | None = "train") -> cost.Work:
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

    def base(self) -> cost.Work | None:
        settings = self.plan.base_settings(self.model)
        if settings["kind"] != "demo":
            return cost.Work()  # a pointer: start-up only
        length = self.upstream_length(settings["max_length"])
        work = self.training(cost.Work(), {**settings, "method": "full"}, settings["steps"], length,
                             self.plan.shard_paths(self.model)[0], None)
        evals = (settings["steps"] // settings["eval_every"] + 2) if settings["eval_every"] else 0
        work = self.scoring(work, evals * min(256, settings["n_examples"]), length, 16384)
        work.load_bytes = self.weight_bytes  # written once
        work.examples, work.setups["train"] = settings["n_examples"], 1
        return work

    def finetune(self, task: str, settings: dict, monitored: bool = True) -> cost.Work:
        """A fine-tune of `task` under `settings`, with its monitor's checks where the task's fine-tune is monitored
        (`monitored`: an arm's fine-tune of the same task is not: Plan.arm_finetune_settings)."""
        from ..data.batches import planned_steps

        path = self.plan.task_paths(self.model).get(task)
        length = self.lengths.mean(path, settings["max_length"], settings["chat_template"], "train") if path \
            else float(settings["max_length"])
        examples = self._examples(path)
        steps = planned_steps(settings, examples) if examples else settings["steps"]
        work = self.training(cost.Work(), settings, steps, length, path)
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

    def score(self, settings: dict, shard: int, cells: float = 1.0) -> cost.Work:
        """One scoring job's work on a shard: every example, or where `cells` < 1 (a fractional map's run) that
        share of those that are not items (every item is scored under every run)."""
        path = self.plan.shard_paths(self.model)[shard]
        examples = self.plan.shards[self.plan.corpus(self.model)][shard]["count"]
        if cells < 1:
            mc, free, _ = self.lengths.items(path)
            examples = round(mc + free + cells * (examples - mc - free))
        return self.scored_file(settings, path, examples)

    def scored_file(self, settings: dict, path: str, examples: int, share: float = 1.0) -> cost.Work:
        """One scoring job's work on `examples` upstream examples like those of `path` (a shard), whose items
        are the shard's `share`: the examples, their items' options and the answers generated, in the batches
        the scorer makes of them."""
        length = self.upstream_length(settings["max_length"])
        padding = settings["max_padding"]
        if padding is None:  # the scorer's default: batches of equal lengths on a CPU
            padding = 0.0 if device(self.plan, self.model, "score").kind == "cpu" else 0.1
        batches = self.lengths.batches(path, settings["max_length"], self.spec["chat_template"], examples,
                                       settings["token_budget"], padding, settings.get("packing", False))
        work = self.scoring(cost.Work(), examples, length, settings["token_budget"], batches)
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

    def semantic(self) -> cost.Work:
        """MiniLM's forward over every upstream example and each task's training examples (forgetmap.correlate):
        texts at most its 256 tokens, in batches of `batch_size`."""
        settings = self.spec["correlations"]
        length = min(self.upstream_length(MINILM["max_length"]), MINILM["max_length"])
        texts = self.plan.n_upstream(self.model) + sum(n for _, n in self._task_examples(settings["max_task_examples"]))
        fwd = cost.forward_flops(MINILM["parameters"], MINILM["layers"], MINILM["hidden"], length / 2)
        work = cost.Work().add("score", texts * length, fwd, math.ceil(texts / settings["batch_size"]))
        work.load_bytes = MINILM["bytes"]
        work.examples, work.setups["score"] = texts, 1
        return work

    def gradient(self) -> cost.Work:
        """Every upstream example's gradient, one backward each, projected by the count sketch (forgetmap.gradients),
        and each task's mean gradient, a backward per batch of its training examples."""
        settings = self.spec["correlations"]
        length = self.upstream_length(settings["max_length"])
        examples = self.plan.n_upstream(self.model)
        batches = math.ceil(examples / examples_together(self.shape.parameters, int(length)))
        work = cost.Work().add("train", examples * length, 3 * self.fwd(length), batches)
        work.add("score", examples, PROJECTION_FLOPS * self.parameters, 0)
        template = self.spec["chat_template"]
        tasks = self._task_examples(settings["max_task_examples"])
        for path, n in tasks:
            task_length = self.lengths.mean(path, settings["max_length"], template, "train") if path \
                else float(settings["max_length"])
            work.add("train", n * task_length, 3 * self.fwd(task_length), math.ceil(n / 16))
        work.load_bytes = self.weight_bytes
        work.examples, work.setups["score"] = examples + sum(n for _, n in tasks), 1
        return work

    def prediction(self) -> cost.Work:
        """A (split, method) prediction job: the matrix read, and each seed's completions over its entries."""
        entries = len(self.plan.finetuned[self.model]) * self.plan.n_upstream(self.model)
        work = cost.Work().add("score", entries * self.plan.cfg["prediction"]["seeds"], PREDICT_FLOPS, 0)
        work.add("score", 1, PREDICT_FIXED_FLOPS, 0)
        work.load_bytes = 4.0 * entries
        work.setups["score"] = 1
        return work

    def task_scoring(self, task: str, settings: dict, split: str | None) -> cost.Work:
        """A task's examples scored by the base (the token losses of a token-masking arm)."""
        path = self.plan.task_paths(self.model).get(task)
        length = self.lengths.mean(path, settings["max_length"], settings.get("chat_template", "auto"), split)
        n = self._examples(path) if split == "train" else 0
        work = self.scoring(cost.Work(), n or 1, length, settings.get("token_budget", 16384))
        work.load_bytes = self.weight_bytes
        work.examples, work.setups["score"] = n, 1
        return work

    def judging(self, work: cost.Work, task: str) -> cost.Work:
        """A fine-tune judged as trained and at each interpolation toward the base (forgetmap.mitigation.evaluate):
        each variant loaded beside the base for its task's validation NLL and KL, written where interpolated, and
        its held-out examples and their items scored as a scoring job scores them."""
        path = self.plan.task_paths(self.model).get(task)
        finetune = self.plan.finetune_settings(self.model, task)
        validation = self._examples(path, "validation")
        heldout = self.plan.cfg["mitigation"]["heldout"] or 0
        shard = self.plan.shards[self.plan.corpus(self.model)][0]["count"]
        alphas = self.plan.mitigation.alphas(self.model)
        work = work + cost.Work(load_bytes=self.weight_bytes, examples=validation)  # the base, its validation
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

    def plain(self, task: str) -> cost.Work:
        """Plain fine-tuning's checkpoint judged (`plain_scores`): no training."""
        return self.judging(cost.Work(), task)

    def arm(self, name: str, arm: dict, task: str) -> cost.Work:
        """An arm's job: its fine-tune for each value of its knob (replay's longer run, a frozen reference's
        forward), each judged on the held-out set as trained and at each interpolation."""
        from ..mitigation.knobs import swept

        settings = self.plan.arm_finetune_settings(self.model, task, arm)
        _, values = swept(arm)
        stretch = 1.0 + (arm.get("ratio") or 0.0) if arm.get("replay") else 1.0
        one = self.finetune(task, {**settings, "steps": math.ceil(settings["steps"] * stretch)}, monitored=False)
        if arm.get("kl"):  # the frozen base's forward on every trained token
            one.add("score", one.tokens["train"], self.fwd(settings["max_length"]), one.passes["train"])
        trained = cost.Work(flops=dict(one.flops), passes=dict(one.passes), tokens=dict(one.tokens))
        work = cost.Work(load_bytes=one.load_bytes, examples=one.examples, setups=dict(one.setups))
        for _ in values:  # a fine-tune per value, in the job's one process; each judged
            work = self.judging(work + trained, task)
        return work


def kinds(plan, model: str, m: Model | None = None) -> list[tuple[str, str, list[Job]]]:
    """The model's jobs by kind, each kind's stage, label and jobs: base, fine-tunes, score jobs, token losses,
    arms, prediction jobs, and the semantic and gradient analyses (their work counted by `m`, a Model of
    `model`)."""
    m = m or Model(plan, model)

    def job(work: cost.Work, name: str, **where) -> Job:  # a job of `name`'s benchmark and log templates
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


def job_times(plan, model: str, rates: dict | None = None) -> list[JobTime]:
    """The model's jobs on devices, one row per kind (its longest job's time), before any has run."""
    rates = rates if rates is not None else cost.read_rates()
    m = Model(plan, model)
    rows = []
    for stage, label, jobs in kinds(plan, model, m):
        if not jobs:
            continue
        where = device(plan, model, stage)
        fig = figures(where, rates, m.parameters, probe=not plan.cluster)
        longest = max((job.work for job in jobs), key=_flops)
        several = stage == "finetune" and not label.startswith("arm") and len(jobs) > 1
        rows.append(JobTime(model, stage, f"{label} (longest)" if several else label, len(jobs), where, longest,
                            cost.seconds(longest, fig, starts_warm(plan, stage)), fig,
                            "at most max_length" if m.lengths.bounded else "measured", cost.seconds(longest, fig),
                            tuple(jobs)))
    return rows


def figures(where: cost.Device, rates: dict, parameters: float, probe: bool = True) -> cost.Figures:
    """The figures a job on `where` is estimated with: forgetmap.cost's from `rates`, or, on a CPU the rates do not
    describe (by its probe), the nearest measured CPU's scaled (forgetmap.probe). `probe`: whether the jobs run on
    this machine, the only one a plan probes (a cluster's jobs take their CPU's entry, or borrow, saying so)."""
    from ..probe import scaled_figures

    measured = cpu_probe(where, rates) if probe else None
    found = scaled_figures(where, rates, parameters, measured) if measured is not None else None
    return found or cost.figures(where, rates, parameters)


def cpu_probe(where: cost.Device, rates: dict) -> dict | None:
    """This machine's probe (forgetmap.probe, kept per machine and boot) for a job on the CPU where `rates` has CPU
    figures to check or scale; None otherwise, or where the probe could not run (said once with its reason: the
    figures are taken as they are)."""
    cpus = [d for d in rates.get("devices", {}).values() if d.get("kind") == "cpu"]
    if where.kind != "cpu" or not cpus:
        return None
    from .. import probe

    # one thread in as many processes as this process may run on: what a run of one-thread jobs meets (a job of
    # several threads is scaled from it as a calibrated CPU's figures are), probed once for every stage
    found = probe.measured(where.name, 1, usable_cpus())
    if "failed" not in found:
        return found
    if found["failed"] not in _SAID:
        _SAID.add(found["failed"])
        print(f"forgetmap: the CPU probe could not run on this machine this boot ({found['failed']}); this CPU's job "
              f"times are the rates file's as measured", file=sys.stderr)
    return None


_SAID: set = set()  # the probe failures said in this process: once each, however many rows ask


def _flops(work: cost.Work) -> float:
    return sum(work.flops.values()) + sum(work.passes.values())


def plan_times(plan) -> list[JobTime]:
    return [row for model in plan.computed for row in plan.job_times(model)]


def runtime(plan, model: str, stage: str, attempt: int = 1) -> int:
    """SLURM --time of a stage's job where the config leaves `runtime` unset: its kind's longest estimate with
    forgetmap.cost's margin (x the attempt)."""
    return cost.runtime_minutes(stage_estimate(plan, model, stage), attempt)


def stage_estimate(plan, model: str, stage: str) -> float:
    """The longest estimate of a stage's jobs, in a process of its own (what its SLURM time is sized on)."""
    return max((r.cold_seconds for r in plan.job_times(model) if r.stage == stage), default=0.0)


def estimated(plan) -> bool:
    """Whether some model leaves a timed stage's `runtime` to the estimate."""
    return any(plan.cfg["models"][m]["resources"][stage]["runtime"] is None
               for m in plan.computed for stage in TIMED_STAGES)


def hours(rows: list[JobTime]) -> dict[str, float]:
    """Device-hours of the plan: GPU-hours by kind of card (each GPU a job holds counted), and CPU-hours."""
    totals: dict[str, float] = {}
    for r in rows:
        key = f"{r.device.label().rsplit(' x', 1)[0]} GPU-hours" if r.device.kind == "gpu" else "CPU core-hours"
        totals[key] = totals.get(key, 0.0) + r.count * r.seconds * r.device.count / 3600
    return totals


def time_table(rows: list[JobTime], notes: list[str] = ()) -> str:
    """Every model job's time, one line per kind of job, where its figures come from (measured on this device,
    scaled from another's and by what, or learned from the run's finished jobs), and the plan's device-hours."""
    lines = ["forgetmap: time of each job (forgetmap.cost's estimate from its work and measured rates; docs/gpu.md)",
             f"  {'model':<14} {'job':<30} {'jobs':>5} {'device':<12} {'each':>9} {'total':>9} {'SLURM':>7}  figures"]
    sources = {}
    longest = {}  # a stage's jobs are all given its longest one's time
    for r in rows:
        longest[r.model, r.stage] = max(longest.get((r.model, r.stage), 0.0), r.cold_seconds)
    for r in rows:
        how = f"{r.figures.source}; {r.figures.borrowed}" if r.figures.borrowed else \
            f"{r.figures.source}: measured on this device"
        key = sources.setdefault(how, f"[{len(sources) + 1}]")
        figures = key + (f" {r.learned}" if r.learned else "")
        slurm = f"{cost.runtime_minutes(longest[r.model, r.stage])} min"
        lines.append(f"  {r.model:<14} {r.job[:30]:<30} {r.count:>5} {r.device.label()[:12]:<12} "
                     f"{_duration(r.seconds):>9} {_duration(r.count * r.seconds):>9} {slurm:>7}  {figures}")
    for source, key in sources.items():
        lines.append(f"  {key} {source}")
    for assumed in sorted({r.device.assumed for r in rows if r.device.assumed and r.device.kind == "gpu"}):
        lines.append(f"  ?: {assumed} (name it: the profile's gpu_model)")
    if any(r.seconds != r.cold_seconds for r in rows):
        lines.append("  each: forked from the run's warm process (forgetmap.warm); SLURM: the time a job of its own "
                     f"is given where the config leaves runtime unset (its stage's longest estimate x{cost.MARGIN:g} "
                     f"+ {cost.SLACK_MIN} min)")
    else:
        lines.append(f"  SLURM: the time each job is given where the config leaves runtime unset (its stage's longest "
                     f"estimate x{cost.MARGIN:g} + {cost.SLACK_MIN} min)")
    if any(r.lengths != "measured" for r in rows):
        lines.append("  lengths: every example taken at its max_length where its data or the base's tokenizer does "
                     "not exist yet (an upper bound)")
    if any(r.learned for r in rows):
        lines.append("  learned: the estimate x the median measured / estimated of the kind's jobs finished on its "
                     "device (their benchmark files)")
    for note in notes:
        lines.append(f"  passed over: {note}")
    totals = ", ".join(f"{v:.2f} {k}" for k, v in hours(rows).items())
    lines.append(f"  the whole plan (jobs already done included): {totals}")
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


def report(plan) -> None:
    """The time table to stderr (a dry run prints it), where the rates file has figures for the plan's devices."""
    try:
        rows = plan_times(plan)
    except KeyError as exc:  # no figures for a device kind at all: said, the plan goes on
        print(f"forgetmap: no time estimate: {exc.args[0]}", file=sys.stderr)
        return
    if rows:
        notes = [note for model in plan.computed for note in plan.learning_notes(model)]
        print(time_table(rows, notes), file=sys.stderr)
