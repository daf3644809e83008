"""The sample-wise correctness jobs' plan: transitions of upstream items, Y's low rank and its prediction."""

from __future__ import annotations

from .paths import (BINARY_LOWRANK_OUTPUTS, BINARY_PREDICTION_METRICS, BINARY_PREDICTION_SCORES, CORRECTNESS, MATRIX,
                    SPLIT, TRANSITION_OUTPUTS)


class CorrectnessPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg

    def forgetting(self, model: str) -> str:
        """The model's 1->0 matrix Y."""
        return CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["forgetting"])

    def methods(self, model: str) -> list[str]:
        """The configured predictors of Y; those fitted on Z only where the model has Z."""
        from ..predict.protocol import BINARY_PREDICTORS

        return [m for m in self.cfg["correctness"]["methods"]
                if model not in self.plan.binary_imported or BINARY_PREDICTORS[m][1] == "y"]

    # --- jobs ----------------------------------------------------------------------------------------

    def transitions_settings(self, model: str) -> dict:
        """Every row of Y (Z's rows and the rows imported from eval logs), each against its reference."""
        rows = self.plan.y_rows(model)
        categories = {t: self.plan.categories[model][t] for t in rows}
        settings = {**self.plan.matrix_settings(model), "tasks": rows, "categories": categories,
                    "groups": {c: self.cfg["categories"][c]["group"] for c in sorted(set(categories.values()))},
                    "task_scores": {t: self.plan.scores(model, t) for t in rows},
                    "margin": self.cfg["correctness"]["margin"]}
        if self.plan.checkpoints[model] or self.plan.logged[model]:
            settings["references"] = {t: self.plan.references[model][t] for t in rows}
        benchmarks = self.cfg["upstream"][self.plan.corpus(model)]["benchmark_categories"]
        if benchmarks:
            settings["benchmark_categories"] = benchmarks
        return settings

    def lowrank_inputs(self, model: str) -> dict[str, str]:
        """Y, and Z where the model has it (the SVD R² and the point-biserial correlation beside Y's fit)."""
        inputs = {"forgetting": self.forgetting(model)}
        if model in self.plan.z_models:
            inputs["matrix"] = MATRIX.format(model=model)
        return inputs

    def predict_settings(self, binary_method: str) -> dict:
        """A predictor of Y: the protocol's options, and the parameters configured for its completion
        method under `prediction.methods` (if any)."""
        from ..predict.protocol import BINARY_PREDICTORS

        options = {k: self.cfg["prediction"][k] for k in ("k", "seeds", "threshold", "top_q", "budget")}
        options["k"] = self.cfg["correctness"]["k"] or options["k"]
        params = self.cfg["prediction"]["methods"].get(BINARY_PREDICTORS[binary_method][0]) or {}
        return {**options, "method": binary_method, "params": params}

    def predict_inputs(self, model: str, split: str, binary_method: str) -> dict[str, str]:
        """Y and the split; Z too for a predictor fitted on it."""
        from ..predict.protocol import BINARY_PREDICTORS

        inputs = {"forgetting": self.forgetting(model), "split": SPLIT.format(model=model, split=split)}
        if BINARY_PREDICTORS[binary_method][1] == "z":
            inputs["matrix"] = MATRIX.format(model=model)
        return inputs

    def metrics(self, model: str) -> list[str]:
        return [BINARY_PREDICTION_METRICS.format(model=model, split=s, binary_method=m)
                for s in self.plan.prediction.splits(model) for m in self.methods(model)]

    # --- targets -------------------------------------------------------------------------------------

    def targets(self, model: str) -> list[str]:
        """Transitions (computed models with items), the logistic ranks of Y and its prediction."""
        if model not in self.plan.y_models:
            return []
        names = [*TRANSITION_OUTPUTS.values()] * (model in self.plan.item_models) + [*BINARY_LOWRANK_OUTPUTS.values()]
        out = [CORRECTNESS.format(model=model, name=n) for n in names]
        return out + ([BINARY_PREDICTION_SCORES.format(model=model)] if self.plan.prediction.splits(model) else [])
