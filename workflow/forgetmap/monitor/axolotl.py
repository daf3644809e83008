"""The forgetting monitor as an Axolotl plugin: a run configured in Axolotl's YAML names the plugin and a
`forgetmap:` block, and Axolotl's own trainer (a transformers `Trainer`) runs `ForgettingMonitor`:

    plugins:
      - forgetmap.monitor.axolotl.ForgettingMonitorPlugin
    forgetmap:
      map: map.parquet          # a forecast map of the base (docs/monitor.md), or probes: for the naive monitor
      every: 100                # a check every N optimizer steps (without it: at each of Axolotl's evaluations)
      budget: 0.15
      items:                    # a benchmark's items too: an lm-eval task (a tinyBenchmarks one is one)
        task: arc_easy
        k: 30
        map: items.parquet

The block is validated with Axolotl's own config (pydantic, as Axolotl validates its keys): an unknown key, a value
of the wrong kind or range, or a map or probes file that is not there, is refused before anything loads, naming
the key. The monitor is built before the model
loads (so a missing map file or a level the map has no interval for is refused then) and attached to the trainer
Axolotl builds: its scalars are logged through that trainer, so they reach every logger the config turns on
(`use_wandb`, `use_tensorboard`, ...), a budget saves and stops as the transformers callback does, and a resume
(`resume_from_checkpoint`, `auto_resume_from_checkpoints`) brings its baseline and checks back from the checkpoint.
This module imports Axolotl: it is imported only where Axolotl runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from axolotl.integrations.base import BasePlugin
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .callback import BASE_TOLERANCE, ForgettingMonitor
from .items import K, ItemWatch


def existing(path: str | None) -> str | None:
    """A map or probes file the block names must be there when the config is read, before Axolotl prepares any
    data (pydantic names the key)."""
    if path is not None and not Path(path).is_file():
        raise ValueError(f"no file at {path!r} (a relative path is read from {Path.cwd()})")
    return path


class LmEvalSettings(BaseModel):
    """How the items' task is read (forgetmap.correctness.benchmark.from_lm_eval's keywords)."""

    model_config = ConfigDict(extra="forbid")

    include_path: str | list[str] | None = None
    num_fewshot: int | None = Field(None, ge=0)
    limit: int | None = Field(None, ge=1)
    metric: Literal["acc", "acc_norm"] = "acc"
    chat_template: bool = False
    generate: bool = False
    max_gen_toks: int | None = Field(None, ge=1)
    filter: str | None = None


class ItemSettings(BaseModel):
    """A benchmark's items to watch (forgetmap.monitor.items.ItemWatch): `task` an lm-eval task or group name (or a
    list), `map` an item map file (none: the k items' own rates)."""

    model_config = ConfigDict(extra="forbid")

    task: str | list[str]
    map: str | None = None
    k: int = Field(K, ge=2)
    choose: Literal["random", "dopt"] = "random"
    seed: int = 0
    method: str | None = None
    params: dict | None = None
    budget: dict[Literal["acc_drop", "F"], float] | None = None
    estimate: Literal["completion", "margins"] = "completion"
    lm_eval: LmEvalSettings | None = None

    @field_validator("map")
    @classmethod
    def _map_exists(cls, path):
        return existing(path)

    def watch(self) -> ItemWatch:
        return ItemWatch(self.task, self.map, k=self.k, choose=self.choose, seed=self.seed, method=self.method,
                         params=self.params, budget=self.budget, estimate=self.estimate,
                         lm_eval=None if self.lm_eval is None else self.lm_eval.model_dump(exclude_none=True))


class ForgettingMonitorSettings(BaseModel):
    """The `forgetmap:` block: `ForgettingMonitor`'s arguments (forgetmap.monitor.callback), `items` an
    `ItemSettings`."""

    model_config = ConfigDict(extra="forbid")

    map: str | None = None
    probes: str | None = None
    items: ItemSettings | None = None
    every: int | None = Field(None, ge=1)
    budget: float | None = None
    patience: int = Field(1, ge=1)
    level: float | None = Field(None, gt=0, lt=1)
    token_budget: int = Field(4096, ge=1)
    base_tolerance: float | None = Field(BASE_TOLERANCE, ge=0)
    write_rows: bool = True

    @field_validator("map", "probes")
    @classmethod
    def _files_exist(cls, path):
        return existing(path)

    def monitor(self) -> ForgettingMonitor:
        return ForgettingMonitor.from_settings(self, None if self.items is None else self.items.watch())


class ForgettingMonitorArgs(BaseModel):
    """What the plugin adds to Axolotl's config: the `forgetmap:` block, required where the plugin is named."""

    forgetmap: ForgettingMonitorSettings

    @model_validator(mode="before")
    @classmethod
    def _checks_happen(cls, data):
        """Without `every`, checks follow Axolotl's evaluations: a config that evaluates nothing would never check."""
        if not isinstance(data, dict) or not isinstance(data.get("forgetmap"), dict):
            return data
        evaluates = data.get("val_set_size") or data.get("test_datasets")
        if data["forgetmap"].get("every") is None and not evaluates:
            raise ValueError("forgetmap.every: this config evaluates nothing (val_set_size 0, no test_datasets), so "
                             "the monitor would never check; give every: N (a check every N optimizer steps)")
        return data


class ForgettingMonitorPlugin(BasePlugin):
    """Axolotl's hooks: the block validated with its config, the monitor built before the model loads, attached to
    the trainer once Axolotl has built it."""

    def __init__(self):
        super().__init__()
        self.monitor = None

    def get_input_args(self) -> str:
        return f"{__name__}.ForgettingMonitorArgs"

    def pre_model_load(self, cfg):
        self.monitor = ForgettingMonitorSettings(**cfg["forgetmap"]).monitor()

    def post_trainer_create(self, cfg, trainer):
        self.monitor.attach(trainer)

