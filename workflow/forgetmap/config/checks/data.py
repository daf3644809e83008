"""The upstream corpora and the tasks: sources named, answer extraction that compiles, task names free."""

from __future__ import annotations

from ...errors import ConfigError
from .common import RESERVED_RUNS


def check_upstream(cfg: dict) -> None:
    """Each corpus names its source; its answer extraction has a pattern that compiles where it needs one."""
    for name, corpus in cfg["upstream"].items():
        check_extraction(f"upstream.{name}.answers", corpus["answers"])
        for source, own in corpus["answers"]["sources"].items():
            check_extraction(f"upstream.{name}.answers.sources.{source}", own)
        if corpus["format"] == "hf":
            if not corpus["dataset"] and not corpus["parts"]:
                raise ConfigError(f"config key upstream.{name}.dataset: required for format 'hf' (or `parts`)")
            continue
        if corpus["format"] != "demo" and not corpus["path"]:
            raise ConfigError(f"config key upstream.{name}.path: required for format {corpus['format']!r}")


def check_extraction(key: str, spec: dict) -> None:
    """An extractor `regex` has a pattern, and a pattern compiles."""
    import re

    if spec.get("extract") == "regex" and not spec.get("pattern"):
        raise ConfigError(f"config key {key}.pattern: required for extract 'regex'")
    if spec.get("pattern"):
        try:
            re.compile(spec["pattern"])
        except re.error as exc:
            raise ConfigError(f"config key {key}.pattern: value {spec['pattern']!r} is not a regular expression: "
                              f"{exc}") from None


def check_tasks(cfg: dict) -> None:
    """Each task has a usable name, a configured category and a source."""
    from ...data.demo import TASKS as DEMO_TASKS

    for name, task in cfg["tasks"].items():
        if name in RESERVED_RUNS:
            raise ConfigError(f"config key tasks.{name}: the name {name!r} is reserved for the base model's scores")
        if task["category"] not in cfg["categories"]:
            raise ConfigError(f"config key tasks.{name}.category: value {task['category']!r} is not a category; "
                              f"allowed: {', '.join(cfg['categories'])}")
        if task["format"] == "hf":
            if not task["dataset"]:
                raise ConfigError(f"config key tasks.{name}.dataset: required for format 'hf'")
            continue
        if task["path"] is None and name not in DEMO_TASKS:
            raise ConfigError(f"config key tasks.{name}.path: no file given and {name!r} is not a demo task; "
                              f"demo tasks: {', '.join(sorted(DEMO_TASKS))}")
