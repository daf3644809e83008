"""A retried job says how far its time estimate missed.

Where a config leaves a stage's `runtime` unset, a job's SLURM time is its estimate with a margin
(forgetmap.cost.estimate), and a job that runs out of it is run again with twice, then three times, that time.
Snakemake computes a retry's resources just before it runs the job: `leave` then writes beside the job's log
what the attempt before was given and what the estimate was (the log itself the job rewrites from its start).
The job's command finds that note through its own log (the file its stderr writes to), says first what it
means, and removes it (`take`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SUFFIX = ".retry.json"


def leave(log: str, attempt: int, estimate_s: float, previous_min: int, limit_min: int) -> None:
    """Note, beside `log` (the job's log path, relative to the run's directory), that this is a retry."""
    path = Path(str(Path(log).resolve()) + SUFFIX)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"attempt": attempt, "estimate_s": estimate_s, "previous_min": previous_min,
                                "limit_min": limit_min}))


def take() -> str | None:
    """What the note of this job's retry says, where its log has one (removed once read); None elsewhere."""
    try:
        log = os.readlink("/proc/self/fd/2")
    except OSError:  # no /proc, or stderr no file: no log to find a note beside
        return None
    path = Path(log + SUFFIX)
    try:
        facts = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    return said(facts)


def said(facts: dict) -> str:
    estimate_min = facts["estimate_s"] / 60
    ratio = facts["previous_min"] / max(estimate_min, 1e-9)
    return (f"attempt {facts['attempt']} of this job, given {facts['limit_min']} min: attempt {facts['attempt'] - 1} "
            f"did not finish in its {facts['previous_min']} min, {ratio:.1f}x the estimate of {estimate_min:.1f} min "
            f"for its stage's longest job (forgetmap.cost); if it ran out of time, the estimate was short by at least "
            f"that much (set the stage's runtime, or recalibrate: docs/gpu.md)")
