"""The forecast jobs' plan: a model's forecast tasks, the measured tasks their forecasts are fitted on,
the probes, each forecast task's probe scores and the completed rows (forgetmap.predict.forecast)."""

from __future__ import annotations

from .. import config as fm_config
from .paths import BASE_RUN, FORECAST, FORECAST_PROBES, FORECAST_SCORES, MATRIX


class ForecastPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg
        self._modes = {model: fm_config.forecast_modes(self.cfg, model) for model in plan.computed}
        for model, modes in self._modes.items():
            if modes:
                fm_config.checks.check_forecast_count(self.cfg, model, plan.n_upstream(model))

    def modes(self, model: str) -> dict[str, str]:
        """The model's forecast tasks: `forecast` (only forecast) or `check` (also measured in full)."""
        return self._modes.get(model, {})

    def tasks(self, model: str) -> list[str]:
        return list(self.modes(model))

    def fit_tasks(self, model: str) -> list[str]:
        """The measured tasks the forecasts are fitted on: every matrix row that is not itself forecast."""
        return fm_config.fit_tasks(self.cfg, model)

    # --- jobs ----------------------------------------------------------------------------------------

    def probes_inputs(self, model: str) -> dict[str, str | list[str]]:
        return {"matrix": MATRIX.format(model=model), "shards": self.plan.shard_paths(model)}

    def probes_settings(self, model: str) -> dict:
        forecast = self.cfg["forecast"]
        return {"k": forecast["k"], "probes": forecast["probes"], "seed": forecast["seed"],
                "fit_tasks": self.fit_tasks(model)}

    def score_settings(self, model: str, task: str) -> dict:
        """How a forecast row is scored on the probes: as it would be on every shard (a checkpoint's prompts)."""
        return self.plan.run_score_settings(model, task)

    def scores_inputs(self, model: str, task: str) -> dict[str, str]:
        """A forecast task's fine-tune (or a checkpoint's pointer) and the probes it is scored on."""
        return {"model": self.plan.checkpoint(model, task), "shard": FORECAST_PROBES.format(model=model)}

    def forecast_inputs(self, model: str) -> dict[str, str | list[str]]:
        """The matrix (the fit tasks' rows, the base's NLL), the probes, each forecast task's probe scores,
        and the base's scores of every shard (the tokens a full scoring of a checkpoint takes)."""
        return {"matrix": MATRIX.format(model=model), "probes": FORECAST_PROBES.format(model=model),
                "scores": [FORECAST_SCORES.format(model=model, task=t) for t in self.tasks(model)],
                "base_scores": self.plan.scores(model, BASE_RUN)}

    def forecast_settings(self, model: str) -> dict:
        prediction, forecast = self.cfg["prediction"], self.cfg["forecast"]
        return {"tasks": self.tasks(model), "modes": self.modes(model), "fit_tasks": self.fit_tasks(model),
                "k": forecast["k"], "probes": forecast["probes"], "method": forecast["method"],
                "params": prediction["methods"][forecast["method"]],
                "intervals": prediction["intervals"],
                **{key: prediction[key] for key in ("threshold", "top_q", "budget")}}

    def path(self, model: str, name: str = "forecast.parquet") -> str:
        return FORECAST.format(model=model, name=name)

    # --- targets -------------------------------------------------------------------------------------

    def targets(self, model: str) -> list[str]:
        return [self.path(model, "summary.tsv")] if self.modes(model) else []
