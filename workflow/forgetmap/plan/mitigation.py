"""The mitigation jobs' plan (paper §6): the arms, the tasks they fine-tune on, and what each job reads.

An arm fine-tunes a test task with replayed upstream examples, token masks or example weights; every
arm's fine-tune is judged on a held-out set of upstream examples that no arm replays. `none` is plain
fine-tuning, every arm's comparison; at the matrix's own seed it is the matrix's checkpoint, judged on
the held-out set by a job of its own (`plain_scores`); every other run fine-tunes and is judged in one
job (`arm_run`).
"""

from __future__ import annotations

from .. import config as fm_config
from .paths import (ARM_SCORES, BASE, BINARY_PREDICTIONS, CORRECTNESS, HELDOUT, MATRIX, MITIGATION, NO_ARM,
                    PLAIN_SCORES, PREDICTIONS, REPLAY, SPLIT, TOKEN_LOSSES, TRANSITION_OUTPUTS)


class MitigationPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg
        self._tasks = {model: self._model_tasks(model) for model in plan.computed}

    def arms(self) -> dict[str, dict]:
        """Every arm by name, `none` (plain fine-tuning) first."""
        return {NO_ARM: {"replay": "none", "tokens": "none", "weights": "none"}, **self.cfg["mitigation"]["arms"]}

    def replay_arms(self) -> list[str]:
        return [arm for arm, spec in self.arms().items() if spec["replay"] != "none"]

    def tasks(self, model: str) -> list[str]:
        """The tasks every arm of a computed model fine-tunes on (none: no mitigation)."""
        return self._tasks.get(model, [])

    def runs(self, model: str) -> list[tuple[str, int, str]]:
        """(arm, seed, task) of every arm fine-tune judged on the held-out set."""
        return [(arm, seed, task) for arm in self.arms() for seed in self.cfg["mitigation"]["seeds"]
                for task in self.tasks(model)]

    def scores(self, model: str, arm: str, seed: int, task: str) -> str:
        """A run's held-out scores. Plain fine-tuning with the matrix's own seed is the matrix's checkpoint,
        never trained twice: its scores come from `plain_scores`, every other run's from `arm_run`."""
        if arm == NO_ARM and seed == self.plan.finetune_settings(model, task)["seed"]:
            return PLAIN_SCORES.format(model=model, task=task)
        return ARM_SCORES.format(model=model, arm=arm, seed=seed, task=task)

    def prediction_split(self, model: str, arm: str, task: str) -> str | None:
        """The split whose prediction a predicted-replay arm reads for `task`: the arm's own, or else the
        first split that has the task as a test task (None if none has)."""
        return self.plan.prediction.split_of(model, self.arms()[arm].get("split"), task)

    # --- the held-out set and the base's token losses ------------------------------------------------

    def heldout_settings(self, model: str) -> dict:
        return {"size": self.cfg["mitigation"]["heldout"], "seed": self.cfg["mitigation"]["heldout_seed"]}

    def token_loss_settings(self, model: str, task: str) -> dict:
        settings = self.plan.finetune_settings(model, task)
        return {"chat_template": settings["chat_template"], "max_length": settings["max_length"],
                "device": settings["device"], "token_budget": self.cfg["models"][model]["score"]["token_budget"]}

    # --- replay selection ----------------------------------------------------------------------------

    def replay_settings(self, model: str, arm: str, seed: int, task: str) -> dict:
        spec = self.arms()[arm]
        # online: its first phase's replay; self-generated: the drawn examples' prompts seed the generation
        kind = "random" if spec["replay"] in ("online", "self_generated") else spec["replay"]
        return {"task": task, "seed": seed, "replay": kind, "statistic": spec["statistic"], "ratio": spec["ratio"],
                "temperature": spec["temperature"], "selection": spec["selection"],
                "prediction_seed": spec["prediction_seed"], "risk": spec["risk"], "risk_level": spec["risk_level"]}

    def replay_inputs(self, model: str, arm: str, task: str) -> dict[str, str | list[str]]:
        """The held-out set (never replayed), the pool's shards, the task, and the replay scores' source:
        a prediction, or the measured matrix (Z, or Y for P(Y = 1))."""
        inputs = {"heldout": HELDOUT.format(model=model), "shards": self.plan.shard_paths(model),
                  "task": self.plan.task_path(task)}
        spec = self.arms()[arm]
        binary = spec["statistic"] == "forgotten_1to0"  # P(Y = 1): Y's predictions, or Y itself
        if spec["replay"] == "predicted":
            split = self.prediction_split(model, arm, task)
            if split is None:  # a forecast task no split predicts: its forecast row
                inputs["forecast"] = self.plan.forecast.path(model)
            else:
                inputs["prediction"] = (
                    BINARY_PREDICTIONS.format(model=model, split=split, binary_method=spec["method"]) if binary
                    else PREDICTIONS.format(model=model, split=split, method=spec["method"]))
        elif spec["replay"] == "ground_truth" and binary:
            inputs["matrix"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["forgetting"])
        elif spec["replay"] in ("ground_truth", "high_base_nll"):
            inputs["matrix"] = MATRIX.format(model=model)
        return inputs

    # --- an arm's run: its fine-tune, judged on the held-out set -------------------------------------

    def arm_settings(self, model: str, arm: str, seed: int, task: str) -> dict:
        """The task's fine-tuning settings at this seed, the arm, and the step budget replay stretches."""
        from ..mitigation.knobs import compact

        spec = self.arms()[arm]
        settings = {**self.plan.arm_finetune_settings(model, task, spec), "seed": seed,
                    "arm": {"name": arm, **compact(spec)}}
        if spec["replay"] == "online":  # the completion runs inside the job: its method's parameters too
            settings["arm"].update(split=self.prediction_split(model, arm, task), task=task,
                                   params=self.cfg["prediction"]["methods"][spec["method"]],
                                   threshold=self.cfg["prediction"]["threshold"])
        if spec["replay"] != "none":
            from ..mitigation.replay import replay_steps

            settings["steps"] = replay_steps(settings["steps"], spec["ratio"])
        return settings

    def arm_inputs(self, model: str, arm: str, seed: int, task: str) -> dict[str, str | list[str]]:
        """The base, the task and the held-out set; the replayed examples, the base's token losses, and for
        online replay what the job measures, completes and draws from."""
        spec = self.arms()[arm]
        inputs = {"base": BASE.format(model=model), "task": self.plan.task_path(task), "heldout": HELDOUT.format(model=model)}
        if spec["replay"] != "none":
            inputs["replay"] = REPLAY.format(model=model, arm=arm, seed=seed, task=task)
        if spec["tokens"] != "none" or spec["weights"] != "none":
            inputs["token_losses"] = TOKEN_LOSSES.format(model=model, task=task)
        if spec["replay"] == "online":
            inputs.update(matrix=MATRIX.format(model=model),
                          split=SPLIT.format(model=model, split=self.prediction_split(model, arm, task)),
                          shards=self.plan.shard_paths(model))
        return inputs

    def alphas(self, model: str) -> list[float]:
        """The interpolation weights every fine-tune is judged at besides itself (WiSE-FT's sweep)."""
        return sorted(set(self.cfg["mitigation"]["interpolation"]))

    def plain_inputs(self, model: str, task: str) -> dict[str, str]:
        """The matrix's fine-tune of the task, the base (interpolation, signals), the held-out set, the task
        (its validation split)."""
        return {"model": self.plan.checkpoint(model, task), "base": BASE.format(model=model),
                "heldout": HELDOUT.format(model=model), "task": self.plan.task_path(task)}

    # --- the summary ---------------------------------------------------------------------------------

    def summary_settings(self, model: str) -> dict:
        """Every (arm, seed, task) run with its score files, and what the comparisons need."""
        runs = [{"arm": arm, "seed": seed, "task": task, "scores": self.scores(model, arm, seed, task)}
                for arm, seed, task in self.runs(model)]
        arms = self.arms()  # a list: the settings' JSON sorts mapping keys, and the order is the config's
        from ..mitigation.knobs import compact

        return {"runs": runs, "arms": [{"name": name, **compact(spec)} for name, spec in arms.items()],
                "predictions": self.predictions(model),
                "level": self.cfg["mitigation"]["level"],
                "threshold": self.cfg["prediction"]["threshold"], "margin": self.cfg["correctness"]["margin"]}

    def predictions(self, model: str) -> dict[str, str]:
        """The arms' tasks that a split predicts -> the prediction directory the explorer shows (its method,
        seed 0): which held-out examples each task was predicted to forget, beside what each arm protected."""
        shown = self.plan.explorer.predictions(model)
        return {task: shown[task] for task in self.tasks(model) if task in shown}

    def summary_inputs(self, model: str) -> dict[str, str | list[str]]:
        """Every arm's held-out scores, the matrix (base NLL) and, where upstream items carry an answer,
        the transitions (base correctness)."""
        inputs = {"matrix": MATRIX.format(model=model),
                  "scores": [self.scores(model, *run) for run in self.runs(model)],
                  "predictions": sorted(set(self.predictions(model).values()))}
        if model in self.plan.item_models:
            inputs["transitions"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["transitions"])
        return inputs

    def targets(self, model: str) -> list[str]:
        if not self.tasks(model):
            return []
        return [MITIGATION.format(model=model, name=n) for n in ("summary.tsv", "tests.tsv")]

    # --- deriving the tasks, and checking the arms against what the model has -------------------------

    def _model_tasks(self, model: str) -> list[str]:
        """The tasks of the configured list or split (never a checkpoint row: it has no task to fine-tune)."""
        mitigation = self.cfg["mitigation"]
        if not mitigation["arms"] or mitigation["tasks"] is None:
            return []
        splits = self.plan.prediction.splits(model)
        fm_config.checks.check_mitigation_tasks(self.cfg, model, splits)
        tasks = (splits[mitigation["tasks"]["split"]]["test_tasks"] if isinstance(mitigation["tasks"], dict)
                 else list(mitigation["tasks"]))
        tasks = [t for t in tasks if t not in self.plan.checkpoints[model]]  # a checkpoint's row has no task data
        fm_config.checks.check_heldout(self.cfg, model, self.plan.n_upstream(model))
        arm_splits = {(arm, task): self.plan.prediction.split_of(model, spec["split"], task)
                      for arm, spec in mitigation["arms"].items() if spec["replay"] in ("predicted", "online")
                      for task in tasks}
        fm_config.checks.check_arms(self.cfg, model, tasks, splits, arm_splits, model in self.plan.item_models,
                                    self.plan.forecast.modes(model))
        return tasks
