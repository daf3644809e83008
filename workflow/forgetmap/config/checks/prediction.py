"""Prediction, the forecast from probes, and the explorer: methods that exist, splits that name tasks, counts
the corpus can hold."""

from __future__ import annotations

from ...errors import ConfigError
from ..views import before_tasks, fit_tasks, forecast_modes, model_tasks, monitor_of


def check_methods(prediction: dict) -> None:
    """Every parameter under `prediction.methods.NAME` is one the method takes; the probe evaluation's
    method is a configured one without side information."""
    from ...predict.registry import PROVIDED, parameters

    methods = prediction["methods"]
    for name, params in methods.items():
        allowed = parameters(name) if params else {}
        for key in params:
            if key in PROVIDED or key not in allowed:
                raise ConfigError(f"config key prediction.methods.{name}.{key}: {name} has no such parameter; "
                                  f"allowed: {', '.join(allowed) or 'none'}")
    method = prediction["probe_evaluation"]["method"]
    if method not in methods or method == "semantic":
        raise ConfigError(f"config key prediction.probe_evaluation.method: value {method!r} is not a configured "
                          f"prediction method without side information; allowed: "
                          f"{', '.join(m for m in methods if m != 'semantic')}")


def check_splits(cfg: dict) -> None:
    """Each split is in-domain (`test` tasks) or out-of-domain (`test_category` and an in-domain
    `train_split`), naming tasks, categories and splits that exist."""
    splits = cfg["prediction"]["splits"]
    for name, split in splits.items():
        key = f"config key prediction.splits.{name}"
        if split["test"] is not None:
            rows = [*cfg["tasks"], *(c for m in cfg["models"].values() for c in m.get("checkpoints") or {})]
            unknown = [t for t in split["test"] if t not in rows]
            if unknown:
                raise ConfigError(f"{key}.test: value {unknown[0]!r} is not a task or checkpoint; allowed: "
                                  f"{', '.join(rows)}")
            continue
        if split["test_category"] is None or split["train_split"] is None:
            raise ConfigError(f"{key}: give `test` (in-domain) or `test_category` and `train_split` (out-of-domain)")
        if split["test_category"] not in cfg["categories"]:
            raise ConfigError(f"{key}.test_category: value {split['test_category']!r} is not a category; "
                              f"allowed: {', '.join(cfg['categories'])}")
        in_domain = [s for s, spec in splits.items() if spec["test"] is not None]
        if split["train_split"] not in in_domain:
            raise ConfigError(f"{key}.train_split: value {split['train_split']!r} is not an in-domain split; "
                              f"allowed: {', '.join(in_domain) or 'none'}")


def check_known_counts(cfg: dict, model: str, n_examples: int) -> None:
    """The known examples of a test task (`prediction.k`, `correctness.k`, the probe evaluation's reference
    k) must leave something to predict among the model's upstream examples: a config error before any job,
    not a failing predict job beside probe tables written anyway."""
    prediction = cfg["prediction"]
    counts = {"prediction.k": prediction["k"], "correctness.k": cfg["correctness"]["k"],
              "prediction.probe_evaluation.reference_k": prediction["probe_evaluation"]["reference_k"]}
    for key, k in counts.items():
        if k is not None and k >= n_examples:
            raise ConfigError(f"config key {key}: value {k} known examples leave nothing to predict: model {model!r} "
                              f"has {n_examples} upstream examples")


# --- forecast -----------------------------------------------------------------------------------------

def check_forecast(cfg: dict) -> None:
    """Forecast tasks are tasks of a computed model, completed by a configured regression method without
    side information, fitted on at least two measured tasks that are not forecast themselves."""
    from ...predict.registry import method_class

    forecasting = False
    for name, model in cfg["models"].items():
        listed = model.get("forecast") or []
        if model["imported"] is not None:
            if listed:
                raise ConfigError(f"config key models.{name}.forecast: model {name!r} is imported: it fine-tunes "
                                  f"nothing to forecast")
            continue
        own = model_tasks(cfg, name)
        before = before_tasks(cfg, name)
        if before and len(fit_tasks(cfg, name)) < 2:
            raise ConfigError(f"config key tasks.{before[0]}.forecast: value 'before' needs a map of at least 2 "
                              f"measured tasks that are not forecast; model {name!r} has "
                              f"{', '.join(fit_tasks(cfg, name)) or 'none'}")
        unknown = [t for t in listed if t not in own]
        if unknown:
            raise ConfigError(f"config key models.{name}.forecast: value {unknown[0]!r} is not a task of model "
                              f"{name!r}; allowed: {', '.join(own)}")
        modes = forecast_modes(cfg, name)
        check_monitor(cfg, name, own, modes)
        if not modes:
            continue
        forecasting = True
        for row in modes:
            checkpoint = model["checkpoints"].get(row)
            if checkpoint is None:
                continue
            key = f"config key models.{name}.checkpoints.{row}.forecast"
            if checkpoint["path"] is None:
                raise ConfigError(f"{key}: a row from evaluation logs has nothing to score on the probes")
            if checkpoint["reference"] != "base" or model["z"] != "nats_per_token":
                raise ConfigError(f"{key}: a forecast completes Z against the base in nats per token; this row "
                                  f"is compared with {checkpoint['reference']!r} and models.{name}.z is {model['z']}")
        fit = fit_tasks(cfg, name)
        if len(fit) < 2:
            first = next(iter(modes))
            key = f"models.{name}.forecast" if first in listed else (
                f"models.{name}.checkpoints.{first}.forecast" if first in model["checkpoints"] else f"tasks.{first}.forecast")
            raise ConfigError(f"config key {key}: model {name!r} has {len(fit)} measured task(s) that are not "
                              f"forecast ({', '.join(fit) or 'none'}); a forecast is fitted on at least 2")
    method = cfg["forecast"]["method"]
    methods = cfg["prediction"]["methods"]
    if forecasting:
        if method not in methods:
            raise ConfigError(f"config key forecast.method: value {method!r} is not a configured prediction method; "
                              f"allowed: {', '.join(methods)}")
        if method == "semantic" or not getattr(method_class(method), "regression", True):
            raise ConfigError(f"config key forecast.method: {method!r} cannot serve a forecast (a ranking score or "
                              f"side information); a forecast needs mean, additive, knn or mf")


def check_monitor(cfg: dict, model: str, tasks: list[str], modes: dict[str, str]) -> None:
    """A monitored fine-tune is a forecast task's (its probes come from the measured tasks' rows)."""
    if monitor_of(cfg["models"][model]["finetune"]) and not any(t in modes for t in tasks):
        raise ConfigError(f"config key models.{model}.finetune.monitor: model {model!r} has no forecast task to "
                          f"monitor (tasks.NAME.forecast: true or check); its measured tasks are the rows a "
                          f"forecast is fitted on")
    for task in tasks:
        if monitor_of(cfg["tasks"][task].get("finetune") or {}) and task not in modes:
            raise ConfigError(f"config key tasks.{task}.finetune.monitor: task {task!r} is measured, not forecast: "
                              f"only a forecast task's fine-tune is monitored (set tasks.{task}.forecast: check to "
                              f"forecast it and measure it too)")


def check_forecast_count(cfg: dict, model: str, n_examples: int) -> None:
    """The probes must leave something to forecast among the model's upstream examples."""
    k = cfg["forecast"]["k"]
    if k >= n_examples:
        raise ConfigError(f"config key forecast.k: value {k} probes leave nothing to forecast: model {model!r} has "
                          f"{n_examples} upstream examples")


def check_explorer(cfg: dict) -> None:
    """The explorer's method is a known completion method (shown where it is also configured)."""
    from ...predict.registry import METHODS

    method = cfg["explorer"]["method"]
    if method not in METHODS:
        raise ConfigError(f"config key explorer.method: value {method!r} is not a prediction method; allowed: "
                          f"{', '.join(METHODS)}")
