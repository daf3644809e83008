"""What each job gets: a model's runs and their paths, every rule's settings, resources and targets.

`Plan(config)` validates the config (`forgetmap.config`), reads what the DAG's shape depends on (the
upstream corpora's example ids, an imported matrix's task names) and answers every question a rule
asks, so the rule files are wiring. A *run* is anything that yields a checkpoint to score: `base`,
or a task fine-tuned from it. `runs()`, `checkpoint()` and `scores()` are the one definition of
which runs a model has and where their files live; adding a kind of run is a change here.

Paths are templates with Snakemake wildcards; rules use the templates as outputs and the path
functions below as inputs, so no path is typed out twice.
"""

from __future__ import annotations

import copy
import re

from . import config as fm_config
from . import pretrained
from .errors import ConfigError

SHARD = "results/data/upstream/{corpus}/shard-{shard}.parquet"
TASK = "results/data/tasks/{task}.parquet"
BASE = "results/{model}/base"
CHECKPOINT = "results/{model}/checkpoints/{task}"
SCORES = "results/{model}/scores/{run}/shard-{shard}.parquet"
MATRIX = "results/{model}/forgetting.parquet"
SPLIT = "results/{model}/splits/{split}.json"
PREDICTIONS = "results/{model}/prediction/{split}/{method}"
PREDICTION_METRICS = "results/{model}/prediction/{split}/{method}.tsv"
PREDICTION_SCORES = "results/{model}/prediction/scores.tsv"
PROBES = "results/{model}/prediction/probes/{split}.tsv"  # probe strategies side by side (+ _coverage.tsv, .png)
SIMILARITY = "results/{model}/correlations/semantic_similarity.npy"
LOWRANK = "results/{model}/lowrank/{name}"
CORRELATION = "results/{model}/correlations/{name}"
LOWRANK_SUMMARY = "results/lowrank_summary.tsv"
HELDOUT = "results/{model}/mitigation/heldout.parquet"
TOKEN_LOSSES = "results/{model}/mitigation/token_losses/{task}.parquet"
REPLAY = "results/{model}/mitigation/{arm}/seed-{seed}/replay/{task}.parquet"
ARM_CHECKPOINT = "results/{model}/mitigation/{arm}/seed-{seed}/checkpoints/{task}"
ARM_SCORES = "results/{model}/mitigation/{arm}/seed-{seed}/{task}.parquet"
MITIGATION = "results/{model}/mitigation/{name}"
CORRECTNESS = "results/{model}/correctness/{name}"
BINARY_PREDICTIONS = "results/{model}/correctness/prediction/{split}/{binary_method}"
BINARY_PREDICTION_METRICS = "results/{model}/correctness/prediction/{split}/{binary_method}.tsv"
BINARY_PREDICTION_SCORES = "results/{model}/correctness/prediction_scores.tsv"
# the transitions job's outputs by command option, and the low-rank analysis of Y's
TRANSITION_OUTPUTS = {"transitions": "transitions.parquet", "forgetting": "forgetting_1to0.parquet",
                      "backward_transfer": "backward_transfer_0to1.parquet", "rates": "rates.tsv",
                      "rates_figure": "rates.png", "heatmap": "transitions.png"}
BINARY_LOWRANK_OUTPUTS = {"ranks": "lowrank.tsv", "point_biserial": "point_biserial.tsv", "figure": "lowrank.png"}
NO_ARM = "none"  # plain fine-tuning: every arm's comparison

BASE_RUN = "base"
NEVER = "(?!)"  # a wildcard constraint that matches nothing: the rule serves no model


def alternatives(names) -> str:
    """A wildcard constraint matching exactly these names (longest first), or nothing if none."""
    names = sorted(set(names), key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else NEVER


class Plan:
    """The resolved config plus everything the DAG's shape is read from."""

    def __init__(self, config: dict):
        from .data.upstream import example_ids, has_items, shard_plan
        from .released import released_tasks

        self.cfg = cfg = fm_config.resolve(config)
        self.models = list(cfg["models"])
        self.imported = [m for m in self.models if cfg["models"][m]["imported"] is not None]
        self.computed = [m for m in self.models if m not in self.imported]
        # shard plans come from the corpora's ids (and content digests): bad ids fail before any job
        self.shards = {name: shard_plan(example_ids({**spec, "seed": cfg["demo_seed"]}), cfg["shard_size"],
                                        {**spec, "seed": cfg["demo_seed"]})
                       for name, spec in cfg["upstream"].items()
                       if any(cfg["models"][m]["upstream"] == name for m in self.computed)}
        # models whose corpus has items with an answer: their runs are also scored for correctness
        self.item_models = [m for m in self.computed
                            if has_items({**cfg["upstream"][cfg["models"][m]["upstream"]], "seed": cfg["demo_seed"]})]
        # imported models whose released matrix is the binary Y (the paper's exact-match setup), not Z
        self.binary_imported = [m for m in self.imported if cfg["models"][m]["imported"]["statistic"] == "forgotten_1to0"]
        self.y_models = self.item_models + self.binary_imported  # models with a 1->0 matrix Y
        self.z_models = [m for m in self.models if m not in self.binary_imported]  # models with a forgetting matrix Z
        self.tasks: dict[str, list[str]] = {}
        for model in self.models:
            spec = cfg["models"][model]["imported"]
            try:
                self.tasks[model] = (released_tasks(spec["matrix"], spec["meta"]) if spec is not None
                                     else fm_config.model_tasks(cfg, model))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"config key models.{model}.imported.matrix: {exc}") from None
        # pretrained bases: their local files (a directory, or a cached HF id) and identity, found now so a
        # model that is not there fails before any job, and a changed one reruns what depends on it
        self.base_files = {}
        for model in self.computed:
            base = cfg["models"][model]["base"]
            if base["kind"] == "pretrained":
                local = pretrained.locate(base["path"], base["revision"], f"models.{model}.base.path")
                self.base_files[model] = {"local": str(local), "identity": pretrained.identity(local)}
        self._splits = {model: self._model_splits(model) for model in self.models}
        for model in self.computed:
            if self._splits[model]:  # a model without splits predicts nothing: k is never used
                fm_config.check_known_counts(cfg, model, sum(s["count"] for s in self.shards[self.corpus(model)]))
        self._mitigation = {model: self._mitigation_tasks(model) for model in self.computed}
        for model in self.computed:
            for task in self.tasks[model]:
                check_processes(self.finetune_settings(model, task), cfg["models"][model]["resources"]["finetune"]["gpu"],
                                f"models.{model} / tasks.{task}")

    # --- wildcards -----------------------------------------------------------------------------------

    def wildcard_constraints(self) -> dict[str, str]:
        computed_tasks = {t for m in self.computed for t in self.tasks[m]}
        return {"model": alternatives(self.models), "computed": alternatives(self.computed),
                "imported": alternatives(self.imported), "task": alternatives(computed_tasks),
                "corpus": alternatives(self.shards), "run": alternatives({r for m in self.computed for r in self.runs(m)}),
                "split": r"[A-Za-z0-9][A-Za-z0-9_.-]*", "shard": r"\d+", "seed": r"\d+",
                "arm": alternatives([NO_ARM, *self.cfg["mitigation"]["arms"]]),
                "method": alternatives(self.cfg["prediction"]["methods"]),
                "binary_method": alternatives(self.cfg["correctness"]["methods"])}

    # --- runs and their files ------------------------------------------------------------------------

    def runs(self, model: str) -> list[str]:
        """Every run of a computed model whose checkpoint is scored: the base, then each task."""
        return [BASE_RUN, *self.tasks[model]]

    def checkpoint(self, model: str, run: str) -> str:
        return BASE.format(model=model) if run == BASE_RUN else CHECKPOINT.format(model=model, task=run)

    def corpus(self, model: str) -> str:
        return self.cfg["models"][model]["upstream"]

    def shard_paths(self, model: str) -> list[str]:
        corpus = self.corpus(model)
        return [SHARD.format(corpus=corpus, shard=k) for k in range(len(self.shards[corpus]))]

    def scores(self, model: str, run: str) -> list[str]:
        """The score files of one run: one per upstream shard, in corpus order."""
        return [SCORES.format(model=model, run=run, shard=k) for k in range(len(self.shards[self.corpus(model)]))]

    def task_paths(self, model: str) -> dict[str, str]:
        return {t: TASK.format(task=t) for t in self.tasks[model]}

    # --- settings each job gets ----------------------------------------------------------------------

    def corpus_spec(self, corpus: str) -> dict:
        """What a shard job reads: the source, never the corpus size (growing it adds shards only)."""
        spec = self.cfg["upstream"][corpus]
        if spec["format"] == "demo":
            return {"format": "demo", "seed": self.cfg["demo_seed"]}
        if spec["format"] == "hf":  # the shard's digest covers its rows' content: a changed dataset reruns it
            return {k: v for k, v in spec.items() if k not in ("path", "n_examples")}
        return {"format": spec["format"], "path": spec["path"]}

    def shard_settings(self, corpus: str, shard: int) -> dict:
        return {"corpus": self.corpus_spec(corpus), **self.shards[corpus][shard]}

    def task_settings(self, task: str) -> dict:
        """What prepare_task reads: the task's source (a dataset's fingerprint too, so a changed one reruns)."""
        spec = {k: v for k, v in self.cfg["tasks"][task].items() if k != "finetune"}
        if spec["format"] == "hf":
            from .data import hf

            spec["fingerprint"] = hf.fingerprint(spec)  # the dataset is loaded once per process (hf.load)
        return {"name": task, "spec": spec, "seed": self.cfg["seed"], "demo_seed": self.cfg["demo_seed"]}

    def base_settings(self, model: str) -> dict:
        """The base's settings; a pretrained base's local files and identity (a change reruns its pointer)."""
        return {**copy.deepcopy(self.cfg["models"][model]["base"]), "corpus_seed": self.cfg["demo_seed"],
                **self.base_files.get(model, {})}

    def finetune_settings(self, model: str, task: str) -> dict:
        """The model's fine-tuning settings with the task's overrides, plus what training needs to know."""
        settings = copy.deepcopy(self.cfg["models"][model]["finetune"])
        for key, value in (self.cfg["tasks"][task].get("finetune") or {}).items():
            if key == "lora":
                settings["lora"].update(value)
            else:
                settings[key] = value
        settings["chat_template"] = self.cfg["models"][model]["chat_template"]
        return settings

    def score_settings(self, model: str) -> dict:
        return {**self.cfg["models"][model]["score"], "chat_template": self.cfg["models"][model]["chat_template"]}

    def correlation_settings(self, model: str) -> dict:
        return {**self.cfg["models"][model]["correlations"], "chat_template": self.cfg["models"][model]["chat_template"]}

    def matrix_settings(self, model: str) -> dict:
        """The matrix's rows (tasks in config order, their categories and the categories' split groups)
        and the score files of every run it subtracts, shard by shard."""
        categories = {t: self.cfg["tasks"][t]["category"] for t in self.tasks[model]}
        groups = {c: self.cfg["categories"][c]["group"] for c in sorted(set(categories.values()))}
        return {"model": model, "tasks": self.tasks[model], "categories": categories, "groups": groups,
                "base_scores": self.scores(model, BASE_RUN),
                "task_scores": {t: self.scores(model, t) for t in self.tasks[model]}}

    def transitions_settings(self, model: str) -> dict:
        return {**self.matrix_settings(model), "margin": self.cfg["correctness"]["margin"]}

    def binary_prediction_settings(self, method: str) -> dict:
        """A predictor of Y: the protocol's options, and the parameters configured for its completion
        method under `prediction.methods` (if any)."""
        from .predict.protocol import BINARY_PREDICTORS

        options = {k: self.cfg["prediction"][k] for k in ("k", "seeds", "threshold", "top_q", "budget")}
        options["k"] = self.cfg["correctness"]["k"] or options["k"]
        params = self.cfg["prediction"]["methods"].get(BINARY_PREDICTORS[method][0]) or {}
        return {**options, "method": method, "params": params}

    def binary_methods(self, model: str) -> list[str]:
        """The configured predictors of Y; those fitted on Z only where the model has Z."""
        from .predict.protocol import BINARY_PREDICTORS

        return [m for m in self.cfg["correctness"]["methods"]
                if model not in self.binary_imported or BINARY_PREDICTORS[m][1] == "y"]

    def probe_evaluation_settings(self) -> dict:
        """The strategies, ks and draws compared, with the method's parameters and the metric options."""
        prediction = self.cfg["prediction"]
        evaluation = prediction["probe_evaluation"]
        return {**{k: prediction[k] for k in ("threshold", "top_q", "budget", "intervals")}, **evaluation,
                "reference_k": evaluation["reference_k"] or prediction["k"],
                "params": prediction["methods"][evaluation["method"]]}

    def prediction_settings(self, method: str) -> dict:
        options = {k: self.cfg["prediction"][k] for k in ("k", "seeds", "threshold", "top_q", "budget", "probes",
                                                          "intervals")}
        return {**options, "method": method, "params": self.cfg["prediction"]["methods"][method]}

    # --- resources -----------------------------------------------------------------------------------

    def resource(self, model: str, stage: str, key: str, attempt: int = 1):
        """A configured resource of a model's stage; the runtime grows with each retry (SLURM --time)."""
        value = self.cfg["models"][model]["resources"][stage][key]
        return value * attempt if key == "runtime" else value

    # --- prediction ----------------------------------------------------------------------------------

    def splits(self, model: str) -> dict[str, dict]:
        """The model's prediction splits: configured (computed models) or released (imported ones)."""
        return self._splits[model]

    def methods(self, model: str) -> list[str]:
        """The configured methods; `semantic` only where the model's texts give it a similarity matrix."""
        semantic = model in self.computed and self.cfg["models"][model]["correlations"]["semantic"]
        return [m for m in self.cfg["prediction"]["methods"] if m != "semantic" or semantic]

    def _model_splits(self, model: str) -> dict[str, dict]:
        spec = self.cfg["models"][model]["imported"]
        if spec is not None:
            return {name: {"name": name, "released": path} for name, path in spec["splits"].items()}
        return prediction_splits(self.cfg, self.tasks[model])

    # --- mitigation ----------------------------------------------------------------------------------

    def mitigation_tasks(self, model: str) -> list[str]:
        """The tasks every mitigation arm of a computed model fine-tunes on (none: no mitigation)."""
        return self._mitigation.get(model, [])

    def arms(self) -> dict[str, dict]:
        """Every arm by name, `none` (plain fine-tuning) first."""
        return {NO_ARM: {"replay": "none", "tokens": "none", "weights": "none"}, **self.cfg["mitigation"]["arms"]}

    def arm_checkpoint(self, model: str, arm: str, seed: int, task: str) -> str:
        """Plain fine-tuning with the matrix's own seed is the matrix's checkpoint: never trained twice."""
        if arm == NO_ARM and seed == self.finetune_settings(model, task)["seed"]:
            return self.checkpoint(model, task)
        return ARM_CHECKPOINT.format(model=model, arm=arm, seed=seed, task=task)

    def arm_runs(self, model: str) -> list[tuple[str, int, str]]:
        """(arm, seed, task) of every arm fine-tune judged on the held-out set."""
        return [(arm, seed, task) for arm in self.arms() for seed in self.cfg["mitigation"]["seeds"]
                for task in self.mitigation_tasks(model)]

    def arm_settings(self, model: str, arm: str, seed: int, task: str) -> dict:
        """The task's fine-tuning settings at this seed, the arm, and the step budget replay stretches."""
        spec = self.arms()[arm]
        settings = {**self.finetune_settings(model, task), "seed": seed, "arm": {"name": arm, **spec}}
        if spec["replay"] == "online":  # the completion runs inside the job: its method's parameters too
            settings["arm"].update(split=self.prediction_split(model, arm, task), task=task,
                                   params=self.cfg["prediction"]["methods"][spec["method"]],
                                   threshold=self.cfg["prediction"]["threshold"])
        if spec["replay"] != "none":
            settings["steps"] = int(settings["steps"] * (1 + spec["ratio"]))
        return settings

    def replay_settings(self, model: str, arm: str, seed: int, task: str) -> dict:
        spec = self.arms()[arm]
        kind = "random" if spec["replay"] == "online" else spec["replay"]  # online: its first phase's replay
        return {"task": task, "seed": seed, "replay": kind, "statistic": spec["statistic"], "ratio": spec["ratio"],
                "temperature": spec["temperature"], "selection": spec["selection"],
                "prediction_seed": spec["prediction_seed"], "risk": spec["risk"], "risk_level": spec["risk_level"]}

    def prediction_split(self, model: str, arm: str, task: str) -> str | None:
        """The split whose prediction a predicted-replay arm reads for `task`: the arm's own, or else the
        first split that has the task as a test task (None if none has)."""
        return self._split_of(model, self.arms()[arm], task)

    def replay_inputs(self, model: str, arm: str, task: str) -> dict[str, str]:
        """What a replay selection reads besides the held-out set and the task: its scores' source."""
        spec = self.arms()[arm]
        binary = spec["statistic"] == "forgotten_1to0"  # P(Y = 1): Y's predictions, or Y itself
        if spec["replay"] == "predicted":
            split = self.prediction_split(model, arm, task)
            if binary:
                return {"prediction": BINARY_PREDICTIONS.format(model=model, split=split, binary_method=spec["method"])}
            return {"prediction": PREDICTIONS.format(model=model, split=split, method=spec["method"])}
        if spec["replay"] == "ground_truth" and binary:
            return {"matrix": CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["forgetting"])}
        if spec["replay"] in ("ground_truth", "high_base_nll"):
            return {"matrix": MATRIX.format(model=model)}
        return {}

    def online_inputs(self, model: str, arm: str, task: str) -> dict[str, str]:
        """What an online replay arm's fine-tune reads to measure, complete and draw inside the job."""
        if self.arms()[arm]["replay"] != "online":
            return {}
        return {"matrix": MATRIX.format(model=model), "heldout": HELDOUT.format(model=model),
                "split": SPLIT.format(model=model, split=self.prediction_split(model, arm, task)),
                "shards": self.shard_paths(model)}

    def heldout_settings(self, model: str) -> dict:
        return {"size": self.cfg["mitigation"]["heldout"], "seed": self.cfg["mitigation"]["heldout_seed"]}

    def token_loss_settings(self, model: str, task: str) -> dict:
        settings = self.finetune_settings(model, task)
        return {"chat_template": settings["chat_template"], "max_length": settings["max_length"],
                "device": settings["device"], "token_budget": self.cfg["models"][model]["score"]["token_budget"]}

    def mitigation_summary_settings(self, model: str) -> dict:
        """Every (arm, seed, task) run with its score files, and what the comparisons need."""
        runs = [{"arm": arm, "seed": seed, "task": task,
                 "scores": ARM_SCORES.format(model=model, arm=arm, seed=seed, task=task)}
                for arm, seed, task in self.arm_runs(model)]
        arms = self.arms()  # a list: the settings' JSON sorts mapping keys, and the order is the config's
        return {"runs": runs, "arms": [{"name": name, **spec} for name, spec in arms.items()],
                "level": self.cfg["mitigation"]["level"],
                "threshold": self.cfg["prediction"]["threshold"], "margin": self.cfg["correctness"]["margin"]}

    def mitigation_summary_inputs(self, model: str) -> dict[str, str]:
        """The matrix (base NLL) and, where upstream items carry an answer, the transitions (base correctness)."""
        inputs = {"matrix": MATRIX.format(model=model)}
        if model in self.item_models:
            inputs["transitions"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["transitions"])
        return inputs

    def mitigation_targets(self, model: str) -> list[str]:
        if not self.mitigation_tasks(model):
            return []
        return [MITIGATION.format(model=model, name=n) for n in ("summary.tsv", "tests.tsv")]

    def _split_of(self, model: str, spec: dict, task: str) -> str | None:
        if spec["split"] is not None:
            return spec["split"] if task in self.splits(model)[spec["split"]]["test_tasks"] else None
        return next((name for name, split in self.splits(model).items() if task in split["test_tasks"]), None)

    def _check_binary_arm(self, model: str, key: str, spec: dict) -> None:
        """An arm replaying by P(Y = 1) needs Y (items with an answer) and, predicted, a Y predictor."""
        if spec["replay"] not in ("predicted", "ground_truth"):
            raise ConfigError(f"{key}.statistic: forgotten_1to0 scores predicted or ground_truth replay, not "
                              f"{spec['replay']!r}")
        if model not in self.item_models:
            raise ConfigError(f"{key}.statistic: forgotten_1to0 needs upstream items with an answer; the upstream "
                              f"corpus of model {model!r} has none")
        methods = self.cfg["correctness"]["methods"]
        if spec["replay"] == "predicted" and spec["method"] not in methods:
            raise ConfigError(f"{key}.method: value {spec['method']!r} is not a configured predictor of Y; allowed "
                              f"(correctness.methods): {', '.join(methods)}")

    def _check_risk_arm(self, key: str, spec: dict) -> None:
        """Risk-aware replay reads the conformal half-widths a regression method's prediction wrote."""
        from .predict.registry import method_class

        if spec["replay"] != "predicted" or spec["statistic"] != "loss":
            raise ConfigError(f"{key}.risk: risk-aware replay needs replay: predicted on the loss statistic")
        levels = self.cfg["prediction"]["intervals"]
        if spec["risk_level"] not in levels:
            raise ConfigError(f"{key}.risk_level: value {spec['risk_level']} is not one of prediction.intervals "
                              f"({', '.join(map(str, levels)) or 'none'})")
        if spec["method"] in self.cfg["prediction"]["methods"] and (
                not getattr(method_class(spec["method"]), "regression", True) or spec["method"] == "semantic"):
            raise ConfigError(f"{key}.method: {spec['method']!r} writes no intervals (a ranking score or side "
                              f"information); risk-aware replay needs mean, additive, knn or mf")

    def _mitigation_tasks(self, model: str) -> list[str]:
        mitigation = self.cfg["mitigation"]
        if not mitigation["arms"] or mitigation["tasks"] is None:
            return []
        if isinstance(mitigation["tasks"], dict):
            name = mitigation["tasks"]["split"]
            if name not in self.splits(model):
                raise ConfigError(f"config key mitigation.tasks.split: value {name!r} is not a prediction split; "
                                  f"allowed: {', '.join(self.splits(model)) or 'none'}")
            tasks = self.splits(model)[name]["test_tasks"]
        else:
            unknown = [t for t in mitigation["tasks"] if t not in self.tasks[model]]
            if unknown:
                raise ConfigError(f"config key mitigation.tasks: value {unknown[0]!r} is not a task of model "
                                  f"{model!r}; allowed: {', '.join(self.tasks[model])}")
            tasks = list(mitigation["tasks"])
        n_upstream = sum(s["count"] for s in self.shards[self.corpus(model)])
        size = mitigation["heldout"]
        count = int(round(size * n_upstream)) if size < 1 else int(size)
        if size >= 1 and size != int(size):
            raise ConfigError(f"config key mitigation.heldout: value {size} is neither a count nor a share below 1")
        if count >= n_upstream:
            raise ConfigError(f"config key mitigation.heldout: value {size} leaves no replay pool: the upstream "
                              f"corpus of model {model!r} has {n_upstream} examples")
        for arm, spec in mitigation["arms"].items():
            key = f"config key mitigation.arms.{arm}"
            if spec["replay"] == "online" and self.cfg["models"][model]["finetune"]["processes"] > 1:
                raise ConfigError(f"{key}.replay: online replay measures the model inside one training process; "
                                  f"models.{model}.finetune.processes is {self.cfg['models'][model]['finetune']['processes']}")
            if spec["statistic"] == "forgotten_1to0":
                self._check_binary_arm(model, key, spec)
            if spec["risk"]:
                self._check_risk_arm(key, spec)
            if spec["replay"] not in ("predicted", "online"):
                continue
            if spec["statistic"] == "loss" and spec["method"] not in self.cfg["prediction"]["methods"]:
                raise ConfigError(f"{key}.method: value {spec['method']!r} is not a configured prediction method; "
                                  f"allowed: {', '.join(self.cfg['prediction']['methods'])}")
            if spec["split"] is not None and spec["split"] not in self.splits(model):
                raise ConfigError(f"{key}.split: value {spec['split']!r} is not a prediction split; allowed: "
                                  f"{', '.join(self.splits(model)) or 'none'}")
            outside = [t for t in tasks if self._split_of(model, spec, t) is None]
            if outside:
                where = f"split {spec['split']!r}" if spec["split"] else "any prediction split"
                raise ConfigError(f"{key}: task {outside[0]!r} is not a test task of {where}: its forgetting "
                                  f"was never predicted")
            if spec["prediction_seed"] >= self.cfg["prediction"]["seeds"]:
                raise ConfigError(f"{key}.prediction_seed: value {spec['prediction_seed']} is not below "
                                  f"prediction.seeds ({self.cfg['prediction']['seeds']})")
        return tasks

    # --- targets -------------------------------------------------------------------------------------

    def correctness_targets(self, model: str) -> list[str]:
        """Transitions (computed models with items), the logistic ranks of Y and its prediction."""
        if model not in self.y_models:
            return []
        names = [*TRANSITION_OUTPUTS.values()] * (model in self.item_models) + [*BINARY_LOWRANK_OUTPUTS.values()]
        out = [CORRECTNESS.format(model=model, name=n) for n in names]
        return out + ([BINARY_PREDICTION_SCORES.format(model=model)] if self.splits(model) else [])

    def correlation_targets(self, model: str) -> list[str]:
        names = ["cross_task.tsv"]
        if model in self.computed:
            settings = self.cfg["models"][model]["correlations"]
            names += ["semantic.tsv"] * settings["semantic"] + ["gradient.tsv"] * settings["gradient"]
        return [CORRELATION.format(model=model, name=n) for n in names]

    def targets(self) -> list[str]:
        """Everything `snakemake` builds by default."""
        out = []
        for model in self.models:
            out += [SPLIT.format(model=model, split=s) for s in self.splits(model)]
            if model in self.binary_imported:  # no Z: only what Y supports
                out += self.correctness_targets(model)
                continue
            out += [MATRIX.format(model=model), LOWRANK.format(model=model, name="r2.tsv")]
            out += self.correlation_targets(model)
            out += [PREDICTION_SCORES.format(model=model)] if self.splits(model) else []
            out += [PROBES.format(model=model, split=s) for s in self.splits(model)]
            out += self.mitigation_targets(model) if model in self.computed else []
            out += self.correctness_targets(model)
        return out + [LOWRANK_SUMMARY] * bool(self.z_models)


def check_processes(settings: dict, gpus: int, where: str) -> None:
    processes = settings["processes"]
    if processes > 1 and settings["method"] != "full":
        raise ConfigError(f"config key finetune.processes ({where}): value {processes} needs method 'full' "
                          f"(FSDP shards full fine-tuning); a {settings['method']} run fits one device")
    if gpus and gpus != processes:
        raise ConfigError(f"config key resources.finetune.gpu ({where}): value {gpus} must equal finetune.processes "
                          f"({processes}): each training process drives one GPU")


def prediction_splits(cfg: dict, tasks: list[str]) -> dict[str, dict]:
    """Train and test tasks of each configured split, restricted to a model's tasks."""
    splits: dict[str, dict] = {}
    pending = dict(cfg["prediction"]["splits"])
    for name, split in pending.items():  # in-domain splits first: out-of-domain ones refer to them
        key = f"config key prediction.splits.{name}"
        if split["test"] is not None:
            unknown = [t for t in split["test"] if t not in cfg["tasks"]]
            if unknown:
                raise ConfigError(f"{key}.test: value {unknown[0]!r} is not a task; allowed: {', '.join(cfg['tasks'])}")
            test = [t for t in tasks if t in split["test"]]
            categories = {cfg["tasks"][t]["category"] for t in test}
            train = [t for t in tasks if cfg["tasks"][t]["category"] in categories and t not in test]
            splits[name] = {"name": name, "train_tasks": train, "test_tasks": test}
        elif split["test_category"] is None or split["train_split"] is None:
            raise ConfigError(f"{key}: give `test` (in-domain) or `test_category` and `train_split` (out-of-domain)")
    for name, split in pending.items():
        key = f"config key prediction.splits.{name}"
        if split["test"] is None:
            if split["test_category"] not in cfg["categories"]:
                raise ConfigError(f"{key}.test_category: value {split['test_category']!r} is not a category; "
                                  f"allowed: {', '.join(cfg['categories'])}")
            if split["train_split"] not in splits:
                raise ConfigError(f"{key}.train_split: value {split['train_split']!r} is not an in-domain split; "
                                  f"allowed: {', '.join(splits) or 'none'}")
            test = [t for t in tasks if cfg["tasks"][t]["category"] == split["test_category"]]
            splits[name] = {"name": name, "train_tasks": splits[split["train_split"]]["train_tasks"], "test_tasks": test}
    return {name: splits[name] for name in pending}
