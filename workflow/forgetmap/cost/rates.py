"""The rates file: figures measured per device kind (`assets/rates.json`), each with the device, date and commit it
was measured at. Per device, a job's start-up (cold, and forked from a warm server where measured), the rate it loads
and writes checkpoints, its setups and tokenizing, and per kind of work (train, score, generate) the FLOP rate and the
seconds each pass costs beyond its FLOPs, at the model sizes measured. The seconds per pass are what a tiny model or a
decode step spends in launches and Python, where FLOPs say nothing; the FLOP rate is what a large model's matrix
products sustain. `forgetmap calibrate` writes each CPU model's own entry (`cpu_key`), the GPU tier a card's.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError
from .work import KINDS

RATES = Path(__file__).parent.parent / "assets" / "rates.json"
VERSION = 1  # the rates file's format; a file of a later one is refused (a newer forgetmap wrote it)


@dataclass(frozen=True)
class Rate:
    """The figures of one device kind for one kind of work: FLOP/s, seconds per pass; and where they come from."""

    flops_per_s: float
    pass_s: float
    source: str  # the device, date and commit measured


@dataclass(frozen=True)
class Figures:
    """A device's start-up and load rate, and its rate per kind of work."""

    start_s: float
    load_bytes_per_s: float
    rates: dict  # kind -> Rate
    source: str
    borrowed: str | None = None  # the device whose figures these are, where not this one's
    warm_start_s: float | None = None  # a job forked from a warm server (forgetmap.warm), where measured
    setup_s: dict = field(default_factory=dict)  # per setup kind (forgetmap.cost.work.SETUPS), where measured
    example_s: float = 0.0  # tokenizing one example, where measured


def cpu_key(machine: str) -> str:
    """A CPU's entry in the rates file, named by its model (`forgetmap calibrate` writes one per model)."""
    return "cpu-" + (re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-") or "unnamed")


def read_rates(path: str | Path | None = None) -> dict:
    """The rates file: `{"version": 1, "devices": {name: {...}}}`, each device's figures with their provenance; an
    absent file has none. A file that is not JSON, of a later version, or whose entries lack a figure is refused,
    naming it and what is wrong."""
    path = Path(path) if path else RATES
    try:
        rates = json.loads(path.read_text())
    except FileNotFoundError:
        return {"version": VERSION, "devices": {}}
    except (OSError, ValueError) as exc:
        raise DataError(f"rates file {path}: not readable as JSON ({exc}); run `forgetmap calibrate --out {path}` "
                        f"to write it again") from None
    if not isinstance(rates, dict) or not isinstance(rates.get("devices", {}), dict):
        raise DataError(f"rates file {path}: expected an object with a `devices` object")
    version = rates.get("version", VERSION)
    if not isinstance(version, int) or version > VERSION:
        raise DataError(f"rates file {path}: version {version!r} is newer than this forgetmap reads ({VERSION}): "
                        f"upgrade forgetmap, or calibrate again with this one")
    for name, entry in rates.get("devices", {}).items():
        missing = [k for k in ("kind", "start_s", "load_bytes_per_s", "rates", "source")
                   if not isinstance(entry, dict) or k not in entry]
        missing += [f"rates.{k}" for k in KINDS if isinstance(entry, dict) and k not in (entry.get("rates") or {})]
        if missing:
            raise DataError(f"rates file {path}: device {name!r} lacks {', '.join(missing)}")
    return rates


def cpu_entries(rates: dict) -> list[dict]:
    """The rates file's CPU entries, in its order."""
    return [d for d in rates.get("devices", {}).values() if d.get("kind") == "cpu"]


def entry_figures(entry: dict, scale: float | dict, borrowed: str | None, parameters: float) -> Figures:
    """An entry's figures, each kind's FLOP rate x `scale` (one factor, or one per kind of work); of the model sizes
    measured, the nearest `parameters`."""
    rates = {}
    for kind in KINDS:
        measured = entry["rates"][kind]
        measured = measured if isinstance(measured, list) else [measured]
        near = min(measured, key=lambda r: abs(math.log(max(r.get("parameters") or parameters, 1) / max(parameters, 1))))
        factor = scale[kind] if isinstance(scale, dict) else scale
        rates[kind] = Rate(near["flops_per_s"] * factor, near["pass_s"], entry["source"])
    return Figures(entry["start_s"], entry["load_bytes_per_s"], rates, entry["source"], borrowed,
                   entry.get("warm_start_s"), entry.get("setup_s", {}), entry.get("example_s", 0.0))
