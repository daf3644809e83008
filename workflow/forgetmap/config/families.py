"""Task families: one config entry standing for many tasks (the 66 FLAN files, Dolly's categories)."""

from __future__ import annotations

import copy

from ..errors import ConfigError
from .schema import NAME


def expand_families(tasks: dict) -> dict:
    """Task entries that stand for many tasks, one each: a `path` with `{task}` (every matching file, named
    by what `{task}` matched: the 66 FLAN tasks) or `each: COLUMN` of a dataset (one per distinct value:
    Dolly's 8 categories). Other entries stay as they are; names must stay unique."""
    out: dict = {}
    for name, spec in tasks.items():
        members = _file_family(name, spec) if spec["path"] and "{task}" in spec["path"] else (
            _dataset_family(name, spec) if spec["each"] else [(name, spec)])
        for member, member_spec in members:
            if member in out or (member != name and member in tasks):
                raise ConfigError(f"config key tasks.{name}: task {member!r} is defined twice (another entry or "
                                  f"family has that name)")
            out[member] = member_spec
    return out


def _member_name(name: str, value: str, key: str) -> str:
    import re

    member = re.sub(r"[^A-Za-z0-9_.-]", "_", value)
    if not re.match(NAME, member):
        raise ConfigError(f"config key {key}: {value!r} gives no valid task name (names match {NAME})")
    return member


def _file_family(name: str, spec: dict) -> list[tuple[str, dict]]:
    import glob
    import re

    pattern = spec["path"]
    matcher = re.compile(re.escape(pattern).replace(re.escape("{task}"), "(?P<task>[^/]+)") + "$")
    found = sorted(p for p in glob.glob(pattern.replace("{task}", "*")) if matcher.match(p))
    if not found:
        raise ConfigError(f"config key tasks.{name}.path: no file matches {pattern!r}")
    members = []
    for path in found:
        task = matcher.match(path).group("task")
        member = copy.deepcopy(spec)
        member.update(path=path, family=name)
        if spec["validation_path"]:
            member["validation_path"] = spec["validation_path"].replace("{task}", task)
        members.append((_member_name(name, task, f"tasks.{name}.path"), member))
    return members


def _dataset_family(name: str, spec: dict) -> list[tuple[str, dict]]:
    from ..data import hf
    from ..errors import DataError

    if spec["format"] != "hf":
        raise ConfigError(f"config key tasks.{name}.each: needs format hf (a dataset column to split by)")
    try:
        values = hf.distinct(spec, spec["each"])
    except DataError as exc:
        raise ConfigError(f"config key tasks.{name}.each: {exc}") from None
    members = []
    for value in values:
        literal = "".join(f"[{c}]" if c in "*?[" else c for c in value)  # the value itself, not a pattern
        member = copy.deepcopy(spec)
        member.update(each=None, family=name, where={**spec["where"], spec["each"]: literal})
        members.append((_member_name(name, value, f"tasks.{name}.each"), member))
    return members
