"""The workflow config: its schema, its checks, and `resolve`, which gives the config every job reads.

One package holds every config check, section by section (`checks`); the schema (`schema`) is the one
source of the defaults, the generated `config/schema.yaml` and the settings' types; `preflight`
checks what the config points at (a base's tokenizer, template, LoRA modules, the GPUs). Every error
names the key, the value and what is allowed, before any job runs.
"""

from __future__ import annotations

from ..errors import ConfigError
from . import checks
from .checks import about, check_duplicate_keys
from .families import expand_families
from .schema import IMPORTED, LOGS, SCHEMA, explain, with_defaults
from .views import (before_tasks, checkpoint_rows, finetune_settings, fit_tasks, forecast_modes, measured_tasks,
                    model_tasks, monitored_tasks, row_categories)

__all__ = ["SCHEMA", "about", "before_tasks", "check_duplicate_keys", "checks", "expand_families", "finetune_settings", "fit_tasks",
           "forecast_modes", "measured_tasks", "model_tasks", "monitored_tasks", "resolve", "row_categories", "with_defaults",
           "checkpoint_rows"]


def resolve(config: dict) -> dict:
    """Validate `config`, fill defaults, expand task families and check every section a config alone
    decides; raise ConfigError naming the key."""
    import jsonschema

    if not isinstance(config, dict) or not config:
        raise ConfigError("the config is empty: give --configfile or config/config.yaml")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(config))
    if error is not None:
        raise ConfigError(explain(error))
    for name, arm in ((config.get("mitigation") or {}).get("arms") or {}).items():
        checks.check_arm_keys(name, arm)
    cfg = with_defaults(SCHEMA, config)
    for model in cfg["models"].values():
        if model["imported"] is not None:
            model["imported"] = with_defaults(IMPORTED, model["imported"])
        for checkpoint in model["checkpoints"].values():
            if checkpoint["logs"] is not None:
                checkpoint["logs"] = with_defaults(LOGS, checkpoint["logs"])
    cfg["tasks"] = expand_families(cfg["tasks"])
    prediction = cfg["prediction"]
    if isinstance(prediction["methods"], list):  # a list of names: each with its defaults
        prediction["methods"] = {name: {} for name in prediction["methods"]}
    prediction["methods"] = {name: dict(params or {}) for name, params in prediction["methods"].items()}
    checks.check_upstream(cfg)
    checks.check_tasks(cfg)
    checks.check_models(cfg)
    checks.check_methods(prediction)
    checks.check_splits(cfg)
    checks.check_forecast(cfg)
    checks.check_explorer(cfg)
    return cfg
