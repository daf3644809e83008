"""The forecast jobs' plan: a model's forecast tasks, the measured tasks their forecasts are fitted on,
the probes, each forecast task's probe scores and the completed rows (forgetmap.predict.forecast); and
the monitored fine-tunes (`finetune.monitor`), whose probe trajectories become forecast trajectories
(forgetmap.monitor.trajectory).

The probes are chosen from the fit tasks' own score files, not from the matrix: a `check` task is a row
of the matrix, and its monitored fine-tune needs the probes before it trains."""

from __future__ import annotations

from .. import config as fm_config
from .paths import (BASE_RUN, CORRECTNESS, FORECAST, FORECAST_PROBES, FORECAST_SCORES, MATRIX,
                    TRANSITION_OUTPUTS)


class ForecastPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg
        self._modes = {model: fm_config.forecast_modes(self.cfg, model) for model in plan.computed}
        self._monitored = {model: fm_config.monitored_tasks(self.cfg, model) for model in plan.computed}
        self._before = {model: fm_config.before_tasks(self.cfg, model) for model in plan.computed}
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

    def monitored(self, model: str) -> dict[str, dict]:
        """The forecast tasks whose fine-tunes score the probes as they train, with their `monitor`."""
        return self._monitored.get(model, {})

    def _fit_runs(self, model: str) -> list[str]:
        """The fit tasks and the runs they are compared with (other than the base), in the matrix's order."""
        fit = set(self.fit_tasks(model))
        references = self.plan.references.get(model, {})
        needed = fit | {references.get(t, BASE_RUN) for t in fit} - {BASE_RUN}
        return [t for t in self.plan.tasks[model] if t in needed]

    def probes_inputs(self, model: str) -> dict[str, list[str]]:
        """The upstream shards and the score files of the base and of every fit row."""
        return {"shards": self.plan.shard_paths(model),
                "scores": [p for run in (BASE_RUN, *self._fit_runs(model)) for p in self.plan.scores(model, run)]}

    def probes_settings(self, model: str) -> dict:
        forecast = self.cfg["forecast"]
        rows = self.plan.matrix_settings(model)
        runs = self._fit_runs(model)
        rows.update(tasks=runs, categories={t: rows["categories"][t] for t in runs},
                    task_scores={t: rows["task_scores"][t] for t in runs})
        rows["groups"] = {c: g for c, g in rows["groups"].items() if c in rows["categories"].values()}
        if "references" in rows:
            rows["references"] = {t: rows["references"][t] for t in runs}
            rows.pop("checkpoints")
        items = {"items": self.item_draw()} if model in self.plan.item_models else {}
        return {"k": forecast["k"], "probes": forecast["probes"], "seed": forecast["seed"], "audit": forecast["audit"],
                "fit_tasks": self.fit_tasks(model), "rows": rows, **items}

    def monitor_settings(self, model: str, task: str) -> dict | None:
        """A monitored fine-tune's checks, and how it encodes the probes: as the score job does (its NLL at the
        end of training is then the probe score job's, to rounding)."""
        monitor = self.monitored(model).get(task)
        if monitor is None:
            return None
        score = self.plan.run_score_settings(model, task)
        settings = {**monitor, **{key: score[key] for key in ("chat_template", "max_length", "token_budget")}}
        if self.watches_items(model):  # k of the corpus's multiple-choice items, asked as the score jobs ask them
            settings["items"] = {**self.item_draw(),
                                 "asked": {**score["correctness"], "token_budget": score["token_budget"],
                                           "chat_template": score["chat_template"], "shots": score.get("shots", 0),
                                           "ask": score.get("ask"), "row": score.get("row")}}
        return settings

    def item_draw(self) -> dict:
        """Which k items follow the probes: drawn at random with the forecast's seed, among the multiple-choice
        items, or every item with an answer (`forecast.generated`)."""
        forecast = self.cfg["forecast"]
        return {"k": forecast["k"], "seed": forecast["seed"], "generated": forecast["generated"]}

    def watches_items(self, model: str) -> bool:
        """Whether the model's monitored fine-tunes also watch items: a corpus with items whose correctness is
        decided by option log-likelihood (sampled answers are not forecast in the loop)."""
        return model in self.plan.item_models and \
            self.cfg["models"][model]["score"]["correctness"]["answers"] == "options"

    def score_settings(self, model: str, task: str) -> dict:
        """How a forecast row is scored on the probes: as it would be on every shard (a checkpoint's prompts)."""
        return self.plan.run_score_settings(model, task)

    def scores_inputs(self, model: str, task: str) -> dict[str, str]:
        """A forecast task's fine-tune (or a checkpoint's pointer) and the probes it is scored on."""
        return {"model": self.plan.checkpoint(model, task), "shard": FORECAST_PROBES.format(model=model)}

    def probe_scores(self, model: str, task: str) -> str:
        """Where a forecast task's probe values come from: its probe scoring job, or a monitored fine-tune's
        checkpoint, whose last check scored the probes on the weights it saved (no scoring job of its own)."""
        if task in self.monitored(model):
            return self.plan.checkpoint(model, task)
        return FORECAST_SCORES.format(model=model, task=task)

    def forecast_inputs(self, model: str) -> dict[str, str | list[str]]:
        """The matrix (the fit tasks' rows, the base's NLL), the probes, each forecast task's probe values,
        and the base's scores of every shard (the tokens a full scoring of a checkpoint takes)."""
        inputs = {"matrix": MATRIX.format(model=model), "probes": FORECAST_PROBES.format(model=model),
                  "scores": [self.probe_scores(model, t) for t in self.tasks(model)],
                  "base_scores": self.plan.scores(model, BASE_RUN)}
        if model in self.plan.item_models:  # the probes' items: their correctness rates, through the fit rows'
            inputs["transitions"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["transitions"])
        return inputs

    def forecast_settings(self, model: str) -> dict:
        from ..predict.forecast import forecast_params

        prediction, forecast = self.cfg["prediction"], self.cfg["forecast"]
        return {"tasks": self.tasks(model), "modes": self.modes(model), "fit_tasks": self.fit_tasks(model),
                "k": forecast["k"], "probes": forecast["probes"], "method": forecast["method"],
                "params": forecast_params(forecast["method"], prediction["methods"][forecast["method"]]),
                "intervals": prediction["intervals"],
                "references": {t: (self.cfg["models"][model]["checkpoints"] or {}).get(t, {}).get("reference", BASE_RUN)
                               for t in self.tasks(model)},
                **{key: prediction[key] for key in ("threshold", "top_q", "budget")}}

    def trajectory_inputs(self, model: str) -> dict[str, str | list[str]]:
        """The matrix (the fit rows; a `check` task's measured row), the probes, and each monitored task's
        fine-tune, which holds its probe trajectory (`monitor.parquet`)."""
        inputs = {"matrix": MATRIX.format(model=model), "probes": FORECAST_PROBES.format(model=model),
                  "checkpoints": [self.plan.checkpoint(model, t) for t in self.monitored(model)]}
        if self.watches_items(model):  # the items' map (the fit tasks', a check task's correctness) and the base's
            inputs["transitions"] = CORRECTNESS.format(model=model, name=TRANSITION_OUTPUTS["transitions"])
            inputs["base_scores"] = self.plan.scores(model, BASE_RUN)
        return inputs

    def before(self, model: str) -> list[str]:
        """The model's tasks forecast before any fine-tune (`forecast: before`): a task file each, nothing trained."""
        return self._before.get(model, [])

    def before_fit_paths(self, model: str) -> dict[str, str]:
        """The map's rows a before-forecast is fitted on, with their task files: the fit tasks that have one (a
        checkpoint's row has no text)."""
        files = self.plan.task_paths(model)
        return {t: files[t] for t in self.fit_tasks(model) if t in files}

    def before_task_paths(self, model: str) -> dict[str, str]:
        """Every task file a before-forecast reads: the map's rows', then the new tasks'."""
        return {**self.before_fit_paths(model), **{t: self.plan.task_path(t) for t in self.before(model)}}

    def before_inputs(self, model: str) -> dict[str, str | list[str]]:
        """The map, the upstream shards (their texts) and the task files of the map's rows and of the new tasks."""
        return {"matrix": MATRIX.format(model=model), "shards": self.plan.shard_paths(model),
                "tasks": list(self.before_task_paths(model).values())}

    def before_arguments(self, model: str) -> list[str]:
        """`before_inputs`' task files as TASK=path arguments."""
        return [f"{t}={p}" for t, p in self.before_task_paths(model).items()]

    def before_settings(self, model: str) -> dict:
        """The new tasks, the map's rows they are forecast from, the interval levels and how the texts are embedded
        (the model's `correlations`)."""
        correlations = self.cfg["models"][model]["correlations"]
        return {"tasks": self.before(model), "fit_tasks": list(self.before_fit_paths(model)),
                "intervals": self.cfg["prediction"]["intervals"],
                **{key: correlations[key] for key in ("batch_size", "max_task_examples", "device")}}

    def trajectory_settings(self, model: str) -> dict:
        return {**self.forecast_settings(model), "tasks": list(self.monitored(model))}

    def path(self, model: str, name: str = "forecast.parquet") -> str:
        return FORECAST.format(model=model, name=name)

    # --- targets -------------------------------------------------------------------------------------

    def targets(self, model: str) -> list[str]:
        return ([self.path(model, "summary.tsv")] if self.modes(model) else []) + \
            ([self.path(model, "trajectory.tsv")] if self.monitored(model) else []) + \
            ([self.path(model, "before_summary.tsv")] if self.before(model) else [])
