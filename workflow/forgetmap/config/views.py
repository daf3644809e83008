"""Reading a resolved config: a model's tasks and a task's effective fine-tuning settings."""

from __future__ import annotations

import copy


def model_tasks(cfg: dict, model: str) -> list[str]:
    """The tasks a model is fine-tuned on, in config order (the matrix's column order)."""
    chosen = cfg["models"][model]["tasks"]
    return list(cfg["tasks"]) if chosen == "all" else [t for t in cfg["tasks"] if t in chosen]


def finetune_settings(cfg: dict, model: str, task: str) -> dict:
    """The model's fine-tuning settings with the task's overrides (a LoRA override merges into lora)."""
    settings = copy.deepcopy(cfg["models"][model]["finetune"])
    for key, value in (cfg["tasks"][task].get("finetune") or {}).items():
        if key == "lora":
            settings["lora"].update(value)
        else:
            settings[key] = value
    return settings
