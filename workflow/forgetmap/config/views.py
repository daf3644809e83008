"""Reading a resolved config: a model's tasks (fine-tuned, measured, forecast, fitted on), its checkpoints,
the categories of its rows, and a task's effective fine-tuning settings."""

from __future__ import annotations

import copy


def model_tasks(cfg: dict, model: str) -> list[str]:
    """The tasks a model is fine-tuned on, in config order (a task forecast `before` its fine-tune is not)."""
    return [t for t in chosen_tasks(cfg, model) if cfg["tasks"][t].get("forecast") != "before"]


def before_tasks(cfg: dict, model: str) -> list[str]:
    """The model's tasks forecast before any fine-tune (`forecast: before`), in config order."""
    return [t for t in chosen_tasks(cfg, model) if cfg["tasks"][t].get("forecast") == "before"]


def chosen_tasks(cfg: dict, model: str) -> list[str]:
    """The tasks a model names (`models.NAME.tasks`), in config order."""
    chosen = cfg["models"][model]["tasks"]
    if chosen == "all" and not cfg["tasks"] and cfg["models"][model].get("checkpoints"):
        return []  # a map of checkpoints alone: no task to fine-tune
    return list(cfg["tasks"]) if chosen == "all" else [t for t in cfg["tasks"] if t in chosen]


def checkpoint_rows(cfg: dict, model: str) -> list[str]:
    """The model's checkpoints it did not train (`models.NAME.checkpoints`), in config order."""
    return list(cfg["models"][model].get("checkpoints") or {})


def row_categories(cfg: dict, model: str) -> dict[str, str]:
    """Every row of a computed model's matrices (its measured tasks, then its measured checkpoints) -> its
    category."""
    rows = {t: cfg["tasks"][t]["category"] for t in measured_tasks(cfg, model)}
    return {**rows, **{c: spec["category"] for c, spec in (cfg["models"][model].get("checkpoints") or {}).items()
                       if spec.get("forecast") is not True}}


def forecast_modes(cfg: dict, model: str) -> dict[str, str]:
    """The model's forecast tasks: `forecast` (forecast only) or `check` (forecast and measured in full),
    from the task's own `forecast` key or the model's `forecast` list."""
    listed = cfg["models"][model].get("forecast") or []
    modes = {}
    owns = [(t, cfg["tasks"][t].get("forecast", False)) for t in model_tasks(cfg, model)]
    owns += [(c, spec.get("forecast", False)) for c, spec in (cfg["models"][model].get("checkpoints") or {}).items()]
    for row, own in owns:
        if own == "check":
            modes[row] = "check"
        elif own is True or row in listed:
            modes[row] = "forecast"
    return modes


def measured_tasks(cfg: dict, model: str) -> list[str]:
    """The tasks scored on every upstream shard: the matrix's rows, in config order."""
    modes = forecast_modes(cfg, model)
    return [t for t in model_tasks(cfg, model) if modes.get(t) != "forecast"]


def fit_tasks(cfg: dict, model: str) -> list[str]:
    """The rows of Z a model's forecasts are fitted on: every measured task and scored checkpoint that is
    not forecast."""
    modes = forecast_modes(cfg, model)
    checkpoints = [c for c, spec in (cfg["models"][model].get("checkpoints") or {}).items() if spec.get("path")]
    return [t for t in [*measured_tasks(cfg, model), *checkpoints] if t not in modes]


def finetune_settings(cfg: dict, model: str, task: str) -> dict:
    """The model's fine-tuning settings with the task's overrides (a LoRA override merges into lora)."""
    settings = copy.deepcopy(cfg["models"][model]["finetune"])
    for key, value in (cfg["tasks"][task].get("finetune") or {}).items():
        if key == "lora":
            settings["lora"].update(value)
        else:
            settings[key] = value
    return settings


def monitor_of(settings: dict) -> dict | None:
    """A fine-tune's `monitor` with its defaults, or None where it checks nothing."""
    monitor = {"every": None, "at": [], **(settings.get("monitor") or {})}
    return monitor if monitor["every"] or monitor["at"] else None


def monitored_tasks(cfg: dict, model: str) -> dict[str, dict]:
    """The model's fine-tuned forecast tasks whose fine-tune scores the probes as it trains, with their
    `monitor` (measured tasks are the forecast's fit rows: they are never monitored)."""
    modes = forecast_modes(cfg, model)
    out = {}
    for task in model_tasks(cfg, model):
        monitor = monitor_of(finetune_settings(cfg, model, task))
        if task in modes and monitor:
            out[task] = monitor
    return out
