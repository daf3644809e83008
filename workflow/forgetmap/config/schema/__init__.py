"""The config's schema: one definition gives the JSON schema, its defaults and the settings' types.

`SCHEMA` is the single source: `config/schema.yaml` is generated from it (`forgetmap schema`), the
config is validated against it, and `with_defaults(SECTION, settings)` fills a job's settings from the
same defaults, so no default is repeated in the code that reads them. One module per section of the config
(as pypsa-eur keeps one config model per section): `jobs` (a model's fine-tuning, scoring, base,
correlations), `models` (a model, its checkpoints and logs), `data` (corpora and tasks), `prediction`
(splits, methods, forecasting), `mitigation` (arms), `correctness`, `explorer`; `fields` the building
blocks they share. This module assembles them and reads a config against them.
"""

from __future__ import annotations

import copy
from typing import Any

from .correctness import CORRECTNESS
from .data import CORPUS, PART, TASK
from .explorer import EXPLORER
from .fields import NAME, choice, integer, obj
from .jobs import BASE, CORRELATIONS, DEMO_BASE, FINETUNE, SCORE
from .mitigation import ARM, MITIGATION
from .models import CHECKPOINT, IMPORTED, LOGS, MODEL
from .prediction import FORECAST, PREDICTION, SPLIT

__all__ = ["ARM", "BASE", "CHECKPOINT", "CORPUS", "CORRECTNESS", "CORRELATIONS", "DEMO_BASE", "EXPLORER", "FINETUNE",
           "FORECAST", "IMPORTED", "LOGS", "MITIGATION", "MODEL", "NAME", "PART", "PREDICTION", "SCHEMA", "SCORE",
           "SPLIT", "TASK", "explain", "schema_command", "with_defaults"]

SCHEMA = obj({
    "seed": integer(0, "seed of task splits and anything not seeded elsewhere", 0),
    "demo_seed": integer(1234, "seed of the demo world: demo corpora, demo tasks, the demo base's corpus", 0),
    "shard_size": integer(10000, "upstream examples per scoring job", 1),
    "keep_checkpoints": {"type": "boolean", "default": True,
                         "description": "false: fine-tuned checkpoints are temp() and deleted after scoring"},
    "warm_start": {"type": "boolean", "default": True,
                   "description": "a local run without GPU jobs forks each job from one process that imported torch, "
                                  "transformers and pandas once (forgetmap.warm); false: every job starts its own"},
    "upstream": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
                 "additionalProperties": CORPUS, "description": "upstream corpora by name"},
    "categories": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
                   "additionalProperties": obj({"group": choice("in_domain", ("in_domain", "out_of_domain"),
                                                                "prediction split group")}),
                   "description": "task categories and their split group"},
    "tasks": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
              "additionalProperties": TASK, "description": "fine-tuning tasks by name"},
    "models": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": NAME},
               "additionalProperties": MODEL, "description": "models by name"},
    "prediction": PREDICTION,
    "forecast": FORECAST,
    "explorer": EXPLORER,
    "mitigation": MITIGATION,
    "correctness": CORRECTNESS,
}, required=("models",), description="forgetmap workflow config (upstream corpora and tasks are needed by computed "
                                   "models only: a config of imported models alone needs neither)",
   **{"$schema": "https://json-schema.org/draft/2020-12/schema"})


def with_defaults(schema: dict, value: Any) -> Any:
    """`value` with every default of `schema` filled in, nested objects too (a copy; given keys win)."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        return value
    out = dict(value)
    for key, sub in schema.get("properties", {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = with_defaults(sub, out[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in out:
            if key not in schema.get("properties", {}):
                out[key] = with_defaults(extra, out[key])
    return out


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def explain(error) -> str:
    """A schema violation as a message naming the key, the value and what is allowed."""
    where = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"config key {where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}"
    if error.validator == "required":
        return f"config key {where}: {error.message}"
    if error.validator == "enum":
        return f"config key {where}: value {error.instance!r} is not allowed; allowed: " \
               f"{', '.join(map(str, error.validator_value))}"
    if error.validator == "not" and error.validator_value == {"const": "none"}:
        return f"config key {where}: the name 'none' is reserved for plain fine-tuning, every arm's comparison"
    if error.validator == "propertyNames":
        return f"config key {where}: name {error.instance!r} is not allowed; names match {NAME}"
    return f"config key {where}: value {error.instance!r} is invalid: {error.message}"


def schema_command(out: str | None = None) -> None:
    """`forgetmap schema`: the JSON schema as YAML (config/schema.yaml is this output)."""
    import sys
    from pathlib import Path

    import yaml

    text = "# Generated by `forgetmap schema` from forgetmap/config/schema/: edit that, not this file.\n"
    text += yaml.safe_dump(SCHEMA, sort_keys=False, width=110)
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)
