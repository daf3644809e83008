"""The core plan: a config's models, their runs, shards and tasks, and the jobs that measure forgetting.

`Plan(config)` resolves the config (`forgetmap.config` checks it), reads what the DAG's shape depends
on (the upstream corpora's example ids, an imported matrix's task names, a pretrained base's files)
and answers what each rule's job gets: its inputs, settings and resources, by the rule's wildcards. A
*run* is anything that yields a checkpoint to score: `base`, a task fine-tuned from it, or a checkpoint the
user did not train (`models.NAME.checkpoints`: a public post-trained model, compared with the base or
with the checkpoint before it in a chain; no fine-tune job, only a pointer to its files). `runs()`,
`checkpoint()` and `scores()` are the one definition of which runs a model has and where their files
live. The later stages plan their own jobs beside this one: `plan.prediction`, `plan.forecast`,
`plan.mitigation`, `plan.correctness`. A model's `tasks` are the matrix's rows (the measured tasks, then
its checkpoints); `finetuned` holds the tasks it fine-tunes (measured or only forecast); `references` says
what each row is compared with.
"""

from __future__ import annotations

import copy
import json
import os

from .. import config as fm_config
from .. import pretrained
from ..correctness import logs
from .correctness import CorrectnessPlan
from .explorer import ExplorerPlan
from .forecast import ForecastPlan
from .mitigation import MitigationPlan
from .paths import (BASE, BASE_RUN, CHECKPOINT, CORRELATION, CPU_PROBE, FORECAST_PROBES, LOGGED, LOWRANK, LOWRANK_SUMMARY,
                    MATRIX, NO_ARM, POSTTRAINED, SCORES, SCORES_CELLS, SHARD, TASK, alternatives, definition_key)
from .prediction import PredictionPlan


class Plan:
    """The resolved config plus everything the DAG's shape is read from."""

    def __init__(self, config: dict, gpu_models: dict | None = None, cluster: str | None = None,
                 cpu_model: str | None = None, cpu_partition: str | None = None):
        """`gpu_models`: the GPU models a profile names for each stage's jobs, {stage: {where: name}}, `where`
        the profile's setting (the Snakefile reads `set-resources` and `default-resources`; forgetmap.cost.cards).
        `cluster`: the executor the jobs are submitted to where they do not run on this machine (`slurm`), so
        that this machine is never probed for their times; `cpu_model`: the CPU their CPU jobs run on, as the
        profile names it (`cpu_model`, a rates file entry's machine), where not this machine's; `cpu_partition`: the
        cluster's partition they go to (the profile's `slurm_partition`), whose probe job measures it where the rates
        file has no figures of its CPU."""
        from ..data.tasks import check_dataset
        from ..data.upstream import example_ids, has_items, shard_plan
        from ..released import released_tasks

        self.cfg = cfg = fm_config.resolve(config)
        self.gpu_models = gpu_models or {}
        self.cluster, self.cpu_model, self.cpu_partition = cluster, cpu_model, cpu_partition or "default"
        self._shapes: dict = {}  # the bases' sizes, read when a memory decision needs them
        self._memory: dict = {}  # the fine-tunes' memory rows (config.fits.memory_rows), read once
        self._times: dict = {}  # the jobs' time rows (forgetmap.cost.estimate.job_times), estimated once
        self._learned: dict = {}  # those rows learned from the finished jobs, with what they were learned from
        self._measured_cpus: set | None = None  # the CPU models the rates file measured (cpu_probe_path)
        self._partition_probe: tuple = (None, None)  # (its file's inode, mtime and size; the probe read from it)
        self._base_scorers: dict | None = None  # each computed model's base score files' model (base_scorer)
        self._corpora: dict = {}  # local corpus files read for the time estimate (planned_data)
        self.models = list(cfg["models"])
        self.imported = [m for m in self.models if cfg["models"][m]["imported"] is not None]
        self.computed = [m for m in self.models if m not in self.imported]
        # shard plans come from the corpora's ids (and content digests): bad ids fail before any job
        self.shards, ids = {}, {}
        for name, spec in cfg["upstream"].items():
            if any(cfg["models"][m]["upstream"] == name for m in self.computed):
                spec = {**spec, "seed": cfg["demo_seed"]}
                with fm_config.about(f"upstream.{name}"):
                    ids[name] = example_ids(spec)
                    self.shards[name] = shard_plan(ids[name], cfg["shard_size"], spec)
        # models whose corpus has items with an answer: their runs are also scored for correctness
        self.item_models = [m for m in self.computed
                            if has_items({**cfg["upstream"][cfg["models"][m]["upstream"]], "seed": cfg["demo_seed"]})]
        # imported models whose released matrix is the binary Y (the paper's exact-match setup), not Z
        self.binary_imported = [m for m in self.imported if cfg["models"][m]["imported"]["statistic"] == "forgotten_1to0"]
        self.y_models = self.item_models + self.binary_imported  # models with a 1->0 matrix Y
        self.z_models = [m for m in self.models if m not in self.binary_imported]  # models with a forgetting matrix Z
        self.tasks: dict[str, list[str]] = {}  # the matrix's rows
        self.finetuned = {m: fm_config.model_tasks(cfg, m) for m in self.computed}  # measured or forecast
        # a task read from a Hugging Face dataset: its columns and row filter, before any job
        for task in dict.fromkeys(t for m in self.computed for t in self.finetuned[m]):
            spec = cfg["tasks"][task]
            if spec["format"] == "hf":
                with fm_config.about(f"tasks.{spec.get('family') or task}"):
                    check_dataset(spec)
        self.categories: dict[str, dict[str, str]] = {}  # a computed model's rows (of Y) -> their categories
        self.logged: dict[str, dict[str, list[list[str]]]] = {}  # a model's rows imported from eval logs
        for model in self.models:
            spec = cfg["models"][model]["imported"]
            if spec is None:
                self.categories[model] = fm_config.row_categories(cfg, model)
                self.logged[model] = {c: logs.seed_files(s["logs"]["files"]) for c, s in
                                      cfg["models"][model]["checkpoints"].items() if s["logs"] is not None}
                fm_config.checks.check_logs(cfg, model, self.logged[model], model in self.item_models)
                self.tasks[model] = [r for r in self.categories[model] if r not in self.logged[model]]
                continue
            with fm_config.about(f"models.{model}.imported.matrix"):
                self.tasks[model] = released_tasks(spec["matrix"], spec["meta"])
        # pretrained bases: their local files (a directory, or a cached HF id) and identity, found now so a
        # model that is not there fails before any job, and a changed one reruns what depends on it
        self.base_files = {}
        for model in self.computed:
            base = cfg["models"][model]["base"]
            if base["kind"] == "pretrained":
                with fm_config.about(f"models.{model}.base.path"):
                    local = pretrained.locate(base["path"], base["revision"])
                self.base_files[model] = {"local": str(local), "identity": pretrained.identity(local)}
        self.checkpoints = {m: self._checkpoints(m) for m in self.computed}  # name -> local files and identity
        # a model whose every row is an imported eval log has no Z: only correctness
        self.z_models = [m for m in self.z_models if m not in self.computed or self.tasks[m]]
        self.references = {m: {row: self.cfg["models"][m]["checkpoints"].get(row, {}).get("reference", BASE_RUN)
                               for row in self.y_rows(m)} for m in self.computed}
        for model in self.computed:  # a fractional map: every example under as many tasks as the completion needs
            if self.cfg["models"][model]["score"]["cells"] < 1:
                completed = [i for i, item in zip(ids[self.corpus(model)], self._item_flags(model)) if not item]
                fm_config.checks.check_cells(cfg, model, self.fractional_rows(model), completed)
        self.prediction = PredictionPlan(self)
        self.forecast = ForecastPlan(self)
        self.mitigation = MitigationPlan(self)
        self.correctness = CorrectnessPlan(self)
        self.explorer = ExplorerPlan(self)

    def _checkpoints(self, model: str) -> dict[str, dict]:
        """The model's checkpoints found on disk (a directory or the HF cache), each with its identity; a
        chat-template row whose tokenizer has none, or a per-token Z across different tokenizers, is a config
        error before any job (forgetmap.config's checks, from what is read here)."""
        spec = self.cfg["models"][model]
        found = {}
        for name, checkpoint in spec["checkpoints"].items():
            if checkpoint["path"] is None:  # an eval log: nothing to score
                continue
            with fm_config.about(f"models.{model}.checkpoints.{name}.path"):
                local = pretrained.locate(checkpoint["path"], checkpoint["revision"])
            found[name] = {"local": str(local), "identity": pretrained.identity(local)}
        if found:
            templates = {name: pretrained.has_chat_template(c["local"]) for name, c in found.items()}
            tokenizers = {}  # how each run splits text: compared only where Z is per token
            if spec["z"] == "nats_per_token":
                tokenizers = {name: pretrained.tokenizer_identity(c["local"]) for name, c in found.items()}
                tokenizers[BASE_RUN] = pretrained.tokenizer_identity(self.base_files[model]["local"])
            fm_config.checks.check_checkpoint_files(self.cfg, model, templates, tokenizers)
        return found

    # --- wildcards -----------------------------------------------------------------------------------

    def wildcard_constraints(self) -> dict[str, str]:
        computed_tasks = {t for m in self.computed
                          for t in [*self.finetuned[m], *self.forecast.tasks(m), *self.forecast.before(m)]}
        keys = {self.shard_key(c, k) for c in self.shards for k in range(len(self.shards[c]))}
        keys |= {self.task_key(t) for t in computed_tasks if t in self.cfg["tasks"]}  # a checkpoint's row has none
        return {"key": alternatives(keys), "models": alternatives([self.summary_models()] * bool(self.z_models)),
                "model": alternatives(self.models), "computed": alternatives(self.computed),
                "imported": alternatives(self.imported), "task": alternatives(computed_tasks),
                "corpus": alternatives(self.shards), "run": alternatives({r for m in self.computed for r in self.runs(m)}),
                "checkpoint": alternatives({c for m in self.computed for c in self.checkpoints[m]}),
                "logged": alternatives({c for m in self.computed for c in self.logged[m]}),
                "split": r"[A-Za-z0-9][A-Za-z0-9_.-]*", "shard": r"\d+", "seed": r"\d+", "cells": r"[0-9a-f]{8}",
                "arm": alternatives([NO_ARM, *self.cfg["mitigation"]["arms"]]),
                "method": alternatives(self.cfg["prediction"]["methods"]),
                "binary_method": alternatives(self.cfg["correctness"]["methods"])}

    # --- runs and their files ------------------------------------------------------------------------

    def runs(self, model: str) -> list[str]:
        """Every run of a computed model with score files: the base, then each row (task, checkpoint, eval log)."""
        return [BASE_RUN, *self.y_rows(model)]

    def y_rows(self, model: str) -> list[str]:
        """The rows of a computed model's correctness (Y): Z's rows, then the rows imported from eval logs."""
        return [*self.tasks[model], *self.logged[model]]

    def scored_runs(self) -> list[str]:
        """Every run some computed model scores (not imported from eval logs): the score rule's runs."""
        return sorted({r for m in self.computed for r in self.runs(m) if r not in self.logged[m]})

    def checkpoint(self, model: str, run: str) -> str:
        """The model directory a run is scored from: the base, a fine-tune, or a checkpoint's pointer."""
        if run == BASE_RUN:
            return BASE.format(model=model)
        if run in self.checkpoints[model]:
            return POSTTRAINED.format(model=model, checkpoint=run)
        return CHECKPOINT.format(model=model, task=run)

    def corpus(self, model: str) -> str:
        return self.cfg["models"][model]["upstream"]

    # --- a fractional map: which cells each run scores ----------------------------------------------------

    def fractional_rows(self, model: str) -> list[str]:
        """The rows a fractional map (`models.NAME.score.cells` < 1) scores on their cells only: every row of Z
        compared with the base (a row another is compared with is scored in full, so their difference is defined
        wherever the later one is measured); none for a full map."""
        if model not in self.computed or self.cfg["models"][model]["score"]["cells"] >= 1:
            return []
        references = set(self.references[model].values())
        return [r for r in self.tasks[model] if r not in references and self.references[model][r] == BASE_RUN]

    def cells(self, model: str, run: str) -> dict | None:
        """Which cells of the upstream corpus a run's score jobs measure (forgetmap.fractional.row's arguments, and
        whether items are scored in full: a corpus's items are Y's cells, which are not completed), or None where the
        run scores every example. The place is the row's position among the fractional rows, in config order."""
        rows = self.fractional_rows(model)
        if run not in rows:
            return None
        score = self.cfg["models"][model]["score"]
        return {"design": score["design"], "fraction": float(score["cells"]), "seed": self.cfg["seed"], "task": run,
                "place": rows.index(run), "items": model in self.item_models}

    def _item_flags(self, model: str) -> list[bool]:
        """Whether each upstream example of the model's corpus is an item with an answer (scored in full)."""
        if model not in self.item_models:
            return [False] * self.n_upstream(model)
        from ..data.upstream import item_flags

        return item_flags({**self.cfg["upstream"][self.corpus(model)], "seed": self.cfg["demo_seed"]})

    def n_upstream(self, model: str) -> int:
        """How many upstream examples a computed model is scored on."""
        return sum(s["count"] for s in self.shards[self.corpus(model)])

    def shard_paths(self, model: str) -> list[str]:
        corpus = self.corpus(model)
        return [self.corpus_shard(corpus, k) for k in range(len(self.shards[corpus]))]

    def shard_path(self, model: str, shard: int) -> str:
        return self.corpus_shard(self.corpus(model), shard)

    def corpus_shard(self, corpus: str, shard: int) -> str:
        """Shard k of a corpus, named by its settings: a config that defines the corpus otherwise has its own."""
        return SHARD.format(corpus=corpus, shard=int(shard), key=self.shard_key(corpus, int(shard)))

    def shard_key(self, corpus: str, shard: int) -> str:
        return definition_key(self.shard_settings(corpus, shard))

    def scores(self, model: str, run: str) -> list[str]:
        """The score files of one run: one per upstream shard, in corpus order. A base scored exactly as an
        earlier model's base is (`base_scorer`) is that model's files."""
        owner = self.base_scorer(model) if run == BASE_RUN else model
        shards = range(len(self.shards[self.corpus(model)]))
        if run in self.fractional_rows(model):
            return [SCORES_CELLS.format(model=model, run=run, shard=k, cells=self.cells_key(model, run)) for k in shards]
        return [SCORES.format(model=owner, run=run, shard=k) for k in shards]

    def cells_key(self, model: str, run: str) -> str:
        """The `{cells}` of a fractional run's score files, logs and benchmarks: a digest of its cells."""
        return definition_key(self.cells(model, run))

    def cell_score_settings(self, model: str, run: str) -> dict:
        """A fractional run's scoring settings: the run's, with the cells it measures."""
        return {**self.run_score_settings(model, run), "cells": self.cells(model, run)}

    def base_scorer(self, model: str) -> str:
        """The model whose base score files a computed model reads: the first in the config whose pretrained base
        has the same settings and files (identity), over the same corpus, scored with the same settings (a post-
        training map over a base another model fine-tunes scores nothing twice); the model itself otherwise (a
        base trained here is its model's own)."""
        if self._base_scorers is None:
            first: dict[str, str] = {}
            self._base_scorers = {}
            for m in self.computed:
                if self.cfg["models"][m]["base"]["kind"] != "pretrained":
                    self._base_scorers[m] = m
                    continue
                settings = {k: v for k, v in self.run_score_settings(m, BASE_RUN).items() if k != "row"}
                key = json.dumps([self.base_settings(m), self.corpus(m), settings], sort_keys=True, default=str)
                self._base_scorers[m] = first.setdefault(key, m)
        return self._base_scorers[model]

    def all_scores(self, model: str) -> list[str]:
        """Every score file the matrix reads: each run's shards (the settings say which run is which)."""
        return [p for run in self.runs(model) for p in self.scores(model, run)]

    def task_paths(self, model: str) -> dict[str, str]:
        """The task files of the model's fine-tuned rows (a checkpoint's row has none)."""
        return {t: self.task_path(t) for t in self.tasks[model] if t not in self.checkpoints.get(model, {})}

    def task_path(self, task: str) -> str:
        """A task's prepared file, named by its definition: a config that defines the task otherwise has its own."""
        return TASK.format(task=task, key=self.task_key(task))

    def task_key(self, task: str) -> str:
        return definition_key(self.task_definition(task))

    def task_files(self, model: str) -> list[str]:
        return list(self.task_paths(model).values())

    def task_args(self, model: str) -> list[str]:
        """The model's tasks as `name=path` command arguments."""
        return [f"{t}={p}" for t, p in self.task_paths(model).items()]

    # --- the data jobs -------------------------------------------------------------------------------

    def corpus_file(self, corpus: str) -> list[str]:
        """A corpus file the shard job reads (a dataset's changes show in the shard digests instead)."""
        spec = self.cfg["upstream"][corpus]
        return [spec["path"]] if spec["format"] in ("parquet", "jsonl") else []

    def corpus_spec(self, corpus: str) -> dict:
        """What a shard job reads: the source, never the corpus size (growing it adds shards only)."""
        spec = self.cfg["upstream"][corpus]
        if spec["format"] == "demo":
            return {"format": "demo", "seed": self.cfg["demo_seed"]}
        if spec["format"] == "hf":  # the shard's digest covers its rows' content: a changed dataset reruns it
            return {k: v for k, v in spec.items() if k not in ("path", "n_examples")}
        return {"format": spec["format"], "path": spec["path"]}

    def shard_settings(self, corpus: str, shard: int, key: str | None = None) -> dict:
        """What shard k's job reads; `key` (the file's wildcard) must be the key of exactly these settings."""
        settings = {"corpus": self.corpus_spec(corpus), **self.shards[corpus][int(shard)]}
        if key is not None and key != definition_key(settings):
            raise ValueError(f"{SHARD.format(corpus=corpus, shard=shard, key=key)}: not this config's shard "
                             f"{shard} of upstream.{corpus} (that is {self.corpus_shard(corpus, shard)})")
        return settings

    def planned_data(self, path: str):
        """The rows a data job will write to `path` (a planned shard or task file not written yet) where that is cheap
        to know before it runs: a demo corpus's or task's own generator, a local file's rows (the time estimate's
        lengths); None for a Hugging Face dataset or a path no data job writes."""
        from ..data import tasks as fm_tasks
        from ..data.upstream import planned_shard, read_corpus

        for corpus, shards in self.shards.items():
            for k in range(len(shards)):
                if self.corpus_shard(corpus, k) == path:
                    settings = self.shard_settings(corpus, k)
                    spec = settings["corpus"]
                    if spec["format"] == "demo":
                        return planned_shard(settings)
                    if spec["format"] == "hf":
                        return None
                    if corpus not in self._corpora:  # a local file, read once for all its shards
                        self._corpora[corpus] = read_corpus(spec)
                    return self._corpora[corpus].iloc[settings["first"]:settings["first"] + settings["count"]]
        for task in self.cfg["tasks"]:
            if self.task_path(task) == path:
                definition = self.task_definition(task)
                if definition["spec"]["format"] == "hf":
                    return None
                return fm_tasks.read_task(task, definition["spec"], definition["seed"], definition["demo_seed"])
        return None

    def task_inputs(self, task: str) -> list[str]:
        spec = self.cfg["tasks"][task]
        return [p for p in (spec["path"], spec["validation_path"]) if p and spec["format"] == "file"]

    def task_definition(self, task: str) -> dict:
        """What defines a task's prepared file (its key): the task's source and how it is read, the seeds."""
        spec = {k: v for k, v in self.cfg["tasks"][task].items() if k not in ("finetune", "forecast")}
        return {"name": task, "spec": spec, "seed": self.cfg["seed"], "demo_seed": self.cfg["demo_seed"]}

    def task_settings(self, task: str, key: str | None = None) -> dict:
        """What prepare_task reads: the task's definition (a dataset's fingerprint too, so a changed one reruns
        in place); `key` (the file's wildcard) must be the definition's key."""
        settings = self.task_definition(task)
        if key is not None and key != definition_key(settings):
            raise ValueError(f"{TASK.format(task=task, key=key)}: not this config's task {task!r} "
                             f"(that is {self.task_path(task)})")
        if settings["spec"]["format"] == "hf":
            from ..data import hf

            settings["spec"]["fingerprint"] = hf.fingerprint(settings["spec"])  # loaded once per process (hf.load)
        return settings

    # --- models and scores ---------------------------------------------------------------------------

    def base_settings(self, model: str) -> dict:
        """The base's settings; a pretrained base's local files and identity (a change reruns its pointer)."""
        return {**copy.deepcopy(self.cfg["models"][model]["base"]), "corpus_seed": self.cfg["demo_seed"],
                **self.base_files.get(model, {})}

    def finetune_inputs(self, model: str, task: str) -> dict[str, str]:
        """The base and the task; a monitored fine-tune (finetune.monitor) also the probes it scores."""
        inputs = {"base": BASE.format(model=model), "task": self.task_path(task)}
        if task in self.forecast.monitored(model):
            inputs["probes"] = FORECAST_PROBES.format(model=model)
            if self.forecast.watches_items(model):
                inputs["shards"] = self.shard_paths(model)
        return inputs

    def finetune_settings(self, model: str, task: str) -> dict:
        """The model's fine-tuning settings with the task's overrides, plus the chat template training renders;
        `gradient_checkpointing: auto` decided where the job's GPU memory is known; a monitored fine-tune's
        checks and how it encodes the probes."""
        settings = self.arm_finetune_settings(model, task, None)
        monitor = self.forecast.monitor_settings(model, task)
        return {**settings, "monitor": monitor} if monitor else settings

    def arm_finetune_settings(self, model: str, task: str, arm: dict | None) -> dict:
        """`finetune_settings` for a fine-tune under a mitigation arm, whose copies count toward its memory."""
        settings = {**fm_config.finetune_settings(self.cfg, model, task),
                    "chat_template": self.cfg["models"][model]["chat_template"]}
        settings.pop("monitor", None)  # where a fine-tune is monitored, finetune_settings says how
        if not settings["packing"]:  # a key only where used: the settings of fine-tunes already made stay as they were
            settings.pop("packing")
        if settings["gradient_checkpointing"] == "auto":
            settings["gradient_checkpointing"] = self.checkpointing(model, settings, arm)
        return settings

    def checkpointing(self, model: str, settings: dict, arm: dict | None = None) -> bool | str:
        """`auto` decided: off on a CPU (a job without GPUs), by the memory estimate where the GPU's memory is
        known exactly (`gpu_memory`), else left to the job (the GPU it gets)."""
        if self.cfg["models"][model]["resources"]["finetune"]["gpu"] == 0:
            return False
        gpu = self.gpu_memory(model, "finetune")
        if gpu is None or gpu.exact is None:
            return "auto"
        from ..memory import fitted

        decided, _ = fitted(self.base_shape(model), settings, True, gpu.exact, arm)
        return decided["gradient_checkpointing"]

    def gpu_memory(self, model: str, stage: str):
        """The memory of each GPU the stage's jobs run on (forgetmap.cost.cards.GpuMemory), or None where it is
        not known before they run: `resources.STAGE.gpu_memory_gib`, else the GPU model the profile names for
        the stage's jobs (the smallest, where its jobs name several)."""
        from ..cost.cards import GpuMemory, memory
        from ..memory import GIB

        resources = self.cfg["models"][model]["resources"][stage]
        if not resources["gpu"]:
            return None
        if resources["gpu_memory_gib"] is not None:
            return GpuMemory(resources["gpu_memory_gib"] * GIB, resources["gpu_memory_gib"] * GIB,
                             f"config key models.{model}.resources.{stage}.gpu_memory_gib")
        named = [memory(name, f"profile setting {setting}: gpu_model={name}")
                 for setting, name in self.gpu_models.get(stage, {}).items()]
        return min((m for m in named if m is not None), key=lambda m: m.high, default=None)

    def base_json(self, model: str) -> str:
        """The base model's transformers config as JSON: from its files (a pretrained base) or built from
        `models.NAME.base.architecture` (the demo's); no weights are read. Read once per architecture and kept
        (forgetmap.anatomy), so planning an architecture read before imports no transformers."""
        from .. import anatomy

        base = self.cfg["models"][model]["base"]
        if base["kind"] == "pretrained":
            return anatomy.pretrained_json(self.base_files[model]["local"])
        return anatomy.demo_json(base["vocab_size"], base["architecture"])

    def base_shape(self, model: str):
        """The base model's size (forgetmap.anatomy.Shape), read once."""
        if model not in self._shapes:
            from ..anatomy import shape

            self._shapes[model] = shape(self.base_json(model))
        return self._shapes[model]

    def score_settings(self, model: str) -> dict:
        """How the model's base and fine-tunes are scored (its chat template) and asked items: plain text
        few-shot where the model has `shots`, else each item in the format it is scored in (the paper's path)."""
        spec = self.cfg["models"][model]
        return self._score_settings(model, spec["chat_template"], spec["shots"], "plain" if spec["shots"] else "item",
                                    f"models.{model}")

    def run_score_settings(self, model: str, run: str) -> dict:
        """How one run is scored and asked: a checkpoint through its own chat template zero-shot (a post-trained
        model), or plain text few-shot where it has `shots` (a base-like model)."""
        checkpoint = self.cfg["models"][model]["checkpoints"].get(run)
        if checkpoint is None:
            return self.score_settings(model)
        return self._score_settings(model, checkpoint["chat_template"], checkpoint["shots"],
                                    "plain" if checkpoint["shots"] else "template",
                                    f"models.{model}.checkpoints.{run}")

    def _score_settings(self, model: str, chat_template: str, shots: int, ask: str, row: str) -> dict:
        """The model's scoring settings with a run's prompt format; where the corpus has items, how the run asks
        them (`ask`, forgetmap.correctness.prompts) and the config key of its prompt format (`row`, named in
        errors); sampled answers take the corpus's answer extraction (keys appear only where used: the
        settings of other runs stay as they were)."""
        spec = self.cfg["models"][model]
        settings = {**copy.deepcopy(spec["score"]), "chat_template": chat_template, **({"shots": shots} if shots else {})}
        if not settings["packing"]:
            settings.pop("packing")
        for key in ("cells", "design", "level"):  # which cells a run scores: its own settings' (cell_score_settings)
            settings.pop(key)
        if model in self.item_models:
            settings.update(ask=ask, row=row)
        if settings["correctness"]["answers"] == "sampled":
            settings["correctness"]["extraction"] = {**self.cfg["upstream"][spec["upstream"]]["answers"],
                                                     "corpus": spec["upstream"]}
        else:
            for key in ("answers", "seeds", "seed", "temperature", "top_p"):
                settings["correctness"].pop(key)
        return settings

    def checkpoint_settings(self, model: str, checkpoint: str) -> dict:
        """A checkpoint's pointer: where its files are and their identity (changed weights rerun its rows)."""
        spec = self.cfg["models"][model]["checkpoints"][checkpoint]
        return {"path": spec["path"], "revision": spec["revision"], **self.checkpoints[model][checkpoint]}

    def matrix_settings(self, model: str) -> dict:
        """The matrix's rows (tasks in config order, their categories and the categories' split groups)
        and the score files of every run it subtracts, shard by shard."""
        categories = {t: self.categories[model][t] for t in self.tasks[model]}
        groups = {c: self.cfg["categories"][c]["group"] for c in sorted(set(categories.values()))}
        settings = {"model": model, "tasks": self.tasks[model], "categories": categories, "groups": groups,
                    "base_scores": self.scores(model, BASE_RUN),
                    "task_scores": {t: self.scores(model, t) for t in self.tasks[model]}}
        if self.checkpoints[model]:  # what each row is compared with, and what each checkpoint is
            settings["references"] = {t: self.references[model][t] for t in self.tasks[model]}
            settings["checkpoints"] = {c: {k: spec[k] for k in ("path", "reference", "category")}
                                       for c, spec in self.cfg["models"][model]["checkpoints"].items()
                                       if c in self.checkpoints[model]}
        if self.cfg["models"][model]["z"] != "nats_per_token":
            settings["statistic"] = self.cfg["models"][model]["z"]
        if self.fractional_rows(model):  # which cells each row measured, and the completion's interval level
            score = self.cfg["models"][model]["score"]
            settings["cells"] = {"rows": {r: self.cells(model, r) for r in self.fractional_rows(model)},
                                 "fraction": float(score["cells"]), "design": score["design"], "level": score["level"],
                                 "seed": self.cfg["seed"]}
        return settings

    # --- rows imported from evaluation logs ---------------------------------------------------------------

    def log_table(self, model: str, logged: str) -> str:
        return LOGGED.format(model=model, logged=logged)

    def log_settings(self, model: str, logged: str) -> dict:
        """An eval-log row's files (each seed's, found at planning) and how they are read and aligned."""
        spec = self.cfg["models"][model]["checkpoints"][logged]["logs"]
        return {**{k: spec[k] for k in ("format", "metric", "align", "id")}, "files": self.logged[model][logged],
                "key": f"models.{model}.checkpoints.{logged}.logs"}

    def log_files(self, model: str, logged: str) -> list[str]:
        return [f for seed in self.logged[model][logged] for f in seed]

    # --- imported models -----------------------------------------------------------------------------

    def imported_inputs(self, model: str) -> list[str]:
        """The released files an import reads (the optional ones where they exist)."""
        import os

        spec = self.cfg["models"][model]["imported"]
        optional = [spec["meta"] or f"{spec['matrix']}.meta", spec["base_logprobs"], spec["sources"],
                    spec["example_ids"]]
        return [spec["matrix"]] + [p for p in optional if p and os.path.exists(p)]

    def imported_matrix(self, model: str) -> str:
        return self.cfg["models"][model]["imported"]["matrix"]

    def import_options(self, model: str) -> list[str]:
        """The released files of an imported model and how to read them, as `forgetmap import` options."""
        import json

        spec = self.cfg["models"][model]["imported"]
        options = []
        for key in ("matrix", "meta", "base_logprobs", "sources", "example_ids"):
            if spec[key]:
                options += [f"--{key.replace('_', '-')}", spec[key]]
        groups = {c: v["group"] for c, v in self.cfg["categories"].items()}
        return options + ["--corpus", model, "--groups", json.dumps(groups, sort_keys=True),
                          "--statistic", spec["statistic"]]

    # --- analyses ------------------------------------------------------------------------------------

    def correlation_settings(self, model: str) -> dict:
        return {**self.cfg["models"][model]["correlations"], "chat_template": self.cfg["models"][model]["chat_template"]}

    def lowrank_tables(self) -> dict[str, str]:
        """Each model's rank-R² table, which the cross-model summary reads."""
        return {m: LOWRANK.format(model=m, name="r2.tsv") for m in self.z_models}

    # --- resources -----------------------------------------------------------------------------------

    def resource(self, model: str, stage: str, key: str, attempt: int = 1):
        """A configured resource of a model's stage; the runtime grows with each retry (SLURM --time); a
        fine-tune's memory, where the config leaves it null, from forgetmap.memory's estimate, and a job's runtime
        from forgetmap.cost.estimate's estimate."""
        value = self.cfg["models"][model]["resources"][stage][key]
        if value is None and key == "mem_mb":
            from ..config.fits import host_request

            return host_request(self.finetune_memory(model))
        if value is None and key == "runtime":
            from ..cost.estimate import runtime

            return runtime(self, model, stage, attempt)
        return value * attempt if key == "runtime" else value

    def runtime(self, model: str, stage: str, attempt: int, log: str) -> int:
        """A job's SLURM time at its `attempt` (`resource`); a retry of one whose time is estimated leaves its log
        a note of how far the estimate missed (forgetmap.attempts)."""
        minutes = self.resource(model, stage, "runtime", attempt)
        if attempt > 1 and self.cfg["models"][model]["resources"][stage]["runtime"] is None:
            from ..attempts import leave
            from ..cost.estimate import stage_estimate

            leave(log, attempt, stage_estimate(self, model, stage), self.resource(model, stage, "runtime", attempt - 1),
                  minutes)
        return minutes

    def job_record(self, kind: str, model: str, **where) -> tuple[str, str]:
        """A job's `benchmark:` file and log, from the templates `{kind}_BENCH` and `{kind}_LOG` (forgetmap.plan's
        paths: what a finished job's time is learned from)."""
        from . import paths

        return (getattr(paths, f"{kind}_BENCH").format(model=model, **where),
                getattr(paths, f"{kind}_LOG").format(model=model, **where))

    def job_times(self, model: str) -> list:
        """How long the model's jobs take, one row per kind (forgetmap.cost.estimate: estimated once, for the time
        table and every job's SLURM time the config leaves unset), each kind learned from its jobs finished so far
        (forgetmap.cost.learned: read again when the benchmark files change)."""
        from ..cost import learned

        probed = self.partition_probe()
        if self._times.get(model, (None,))[0] != (probed,):  # estimated again once the partition's probe has run
            from ..cost.estimate import job_times

            self._times[model] = ((probed,), job_times(self, model))
            self._learned.pop(model, None)
        seen = learned.signature(model)
        if self._learned.get(model, (None,))[0] != seen:
            self._learned[model] = (seen, *learned.learn(self._times[model][1]))
        return self._learned[model][1]

    def cpu_probe_path(self) -> str | None:
        """The file of the probe job of the partition the CPU jobs go to, where they go to a cluster whose CPU the
        rates file has no figures of (the profile names none, or one never measured); None for a local run (this
        machine is probed at planning instead) and inside a cluster's job (it plans, and probes nothing)."""
        if not self.cluster or self.cluster == "remote":
            return None
        if self._measured_cpus is None:  # read once: every job's SLURM time asks
            from ..cost.rates import cpu_entries, read_rates

            self._measured_cpus = {entry.get("machine") for entry in cpu_entries(read_rates())}
        return None if self.cpu_model in self._measured_cpus else CPU_PROBE.format(partition=self.cpu_partition)

    def partition_probe(self) -> dict | None:
        """The partition's probe as its job wrote it, once it has run (one that could not run says why in `failed`);
        None before."""
        path = self.cpu_probe_path()
        try:
            info = os.stat(path) if path else None
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size) if info else None  # a file rewritten is a new inode
        except OSError:
            stamp = None
        if stamp is None:
            return None
        if self._partition_probe[0] != stamp:  # read once per file written: every job's SLURM time asks
            try:
                with open(path) as handle:
                    found = json.load(handle)
            except (OSError, ValueError) as exc:
                found = {"failed": f"{path} not readable: {exc}"}
            if not (isinstance(found, dict) and ("failed" in found or "machine" in found)):
                found = {"failed": f"{path} holds no probe"}
            self._partition_probe = (stamp, found)
        return self._partition_probe[1]

    def cpu_probe_targets(self) -> list[str]:
        """The partition's probe job, where it is wanted: its CPU jobs' SLURM times come from the estimate (some CPU
        stage leaves `runtime` unset) and no figures of its CPU exist; once, its file kept."""
        from ..cost.estimate import estimated

        path = self.cpu_probe_path()
        return [path] if path and estimated(self, cpu_only=True) else []

    def learning_notes(self, model: str) -> list[str]:
        """The benchmark files the model's times could not learn from (said under the time table)."""
        self.job_times(model)
        return self._learned[model][2]

    def finetune_memory(self, model: str) -> list[dict]:
        """What the model's fine-tunes need of their devices and the host, one row per kind (estimated once:
        the memory check and every fine-tune job's mem_mb read the same rows)."""
        if model not in self._memory:
            from ..config.fits import memory_rows

            self._memory[model] = memory_rows(self, model)
        return self._memory[model]

    # --- targets -------------------------------------------------------------------------------------

    def task_correlations(self, model: str) -> bool:
        """Does the model have the tasks' texts the semantic and gradient analyses compare with every
        row? Rows that are checkpoints have none: such a model has only the cross-row analyses."""
        return model in self.computed and not self.checkpoints[model]

    def correlation_targets(self, model: str) -> list[str]:
        names = ["cross_task.tsv"]
        if model in self.computed and self.task_correlations(model):
            settings = self.cfg["models"][model]["correlations"]
            names += ["semantic.tsv"] * settings["semantic"] + ["gradient.tsv"] * settings["gradient"]
        return [CORRELATION.format(model=model, name=n) for n in names]

    def targets(self) -> list[str]:
        """Everything `snakemake` builds by default."""
        out = []
        for model in self.models:
            out += self.prediction.split_targets(model)
            if model not in self.z_models:  # no Z (a binary import, a map of eval logs): only what Y supports
                out += self.correctness.targets(model)
                continue
            out += [MATRIX.format(model=model), LOWRANK.format(model=model, name="r2.tsv")]
            out += self.correlation_targets(model)
            out += self.prediction.targets(model)
            out += self.forecast.targets(model)
            out += self.mitigation.targets(model)
            out += self.correctness.targets(model)
            out += self.explorer.targets(model)
        return out + [self.lowrank_summary()] * bool(self.z_models) + self.cpu_probe_targets()

    def lowrank_summary(self) -> str:
        """The table of every model's R²: its name is the models' (sorted, joined by '+')."""
        return LOWRANK_SUMMARY.format(models=self.summary_models())

    def summary_models(self) -> str:
        return "+".join(sorted(self.z_models))
