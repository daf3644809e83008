"""The explorer job's plan: what the page of a model with a matrix Z shows, and the files it reads for it."""

from __future__ import annotations

from .paths import CORRECTNESS, EXPLORER, MATRIX, PREDICTIONS, TRANSITION_OUTPUTS


class ExplorerPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg

    def predictions(self, model: str) -> dict[str, str]:
        """Each split's test tasks as predicted by the explorer's method (the first split that predicts a
        task): task -> the prediction directory (the page shows its seed 0). Computed models only."""
        method = self.cfg["explorer"]["method"]
        if method not in self.plan.prediction.methods(model) or model not in self.plan.computed:
            return {}  # a released split's test tasks are known only once it is imported
        out: dict[str, str] = {}
        for name, split in self.plan.prediction.splits(model).items():
            for task in split["test_tasks"]:
                out.setdefault(task, PREDICTIONS.format(model=model, split=name, method=method))
        return out

    def arm_scores(self, model: str) -> dict[str, str]:
        """`task:arm` -> the held-out scores of every arm (plain fine-tuning included) at the first seed."""
        seeds = self.cfg["mitigation"]["seeds"]
        return {f"{task}:{arm}": self.plan.mitigation.scores(model, arm, seeds[0], task)
                for task in self.plan.mitigation.tasks(model) for arm in self.plan.mitigation.arms()}

    # --- the job -------------------------------------------------------------------------------------

    def inputs(self, model: str) -> dict[str, str | list[str]]:
        """The matrix; the shards (the texts) of a computed model; what else the model has to show."""
        inputs = {"matrix": MATRIX.format(model=model)}
        if model in self.plan.computed:
            inputs["shards"] = self.plan.shard_paths(model)
        if model in self.plan.computed and self.plan.forecast.modes(model):
            inputs["forecast"] = self.plan.forecast.path(model)
            if self.plan.forecast.monitored(model):
                inputs["trajectory"] = self.plan.forecast.path(model, "trajectory.tsv")
        if model in self.plan.item_models:
            inputs["transitions"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["transitions"])
        predictions = sorted(set(self.predictions(model).values()))
        if predictions:
            inputs["prediction_dirs"] = predictions
        if self.plan.mitigation.tasks(model):
            inputs["arm_scores"] = list(self.arm_scores(model).values())
        return inputs

    def arguments(self, model: str) -> list[str]:
        """The optional inputs as the command's TASK=directory and TASK:ARM=file pairs."""
        out = []
        predictions = self.predictions(model)
        if predictions:
            out += ["--predictions", *[f"{task}={path}" for task, path in predictions.items()]]
        if self.plan.mitigation.tasks(model):
            out += ["--arm-scores", *[f"{key}={path}" for key, path in self.arm_scores(model).items()]]
        return out

    def settings(self, model: str) -> dict:
        explorer = self.cfg["explorer"]
        tasks = self.plan.finetuned.get(model, [])  # an imported matrix's categories are its own
        checkpoints = self.cfg["models"][model]["checkpoints"] if model in self.plan.computed else {}
        categories = {**{t: self.cfg["tasks"][t]["category"] for t in tasks},
                      **{c: spec["category"] for c, spec in checkpoints.items()}}
        extra = {"checkpoints": {c: {"path": spec["path"], "reference": spec["reference"]}
                                 for c, spec in checkpoints.items()}} if checkpoints else {}
        return {"model": model, "categories": categories, **extra,
                "modes": self.plan.forecast.modes(model), "top_forgotten": explorer["examples_per_task"],
                "kind": "measured" if model in self.plan.computed else "imported",
                "top_improved": 20, "components": 3, "component_tasks": 8, "component_examples": 20,
                "top_protected": 10, "columns": explorer["columns"]}

    def targets(self, model: str) -> list[str]:
        """Every model with a forgetting matrix Z (an imported binary Y has no Z to show)."""
        return [EXPLORER.format(model=model)] if model in self.plan.z_models else []
