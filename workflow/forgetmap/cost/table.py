"""The time table a dry run prints beside the memory table: one line per kind of job, its count, the time of one,
the total and its SLURM time, where each figure comes from (measured on this device, scaled from another's and by
what, or learned from the run's finished jobs), and the plan's device-hours by kind of GPU and its CPU-hours.
"""

from __future__ import annotations

import sys

from .estimate import MARGIN, SLACK_MIN, JobTime, estimated, hours, plan_times, runtime_minutes


def time_table(rows: list[JobTime], notes: list[str] = ()) -> str:
    """Every model job's time, one line per kind of job, where its figures come from (measured on this device,
    scaled from another's and by what, or learned from the run's finished jobs), and the plan's device-hours."""
    lines = ["forgetmap: time of each job (forgetmap.cost's estimate from its work and measured rates; docs/gpu.md)",
             f"  {'model':<14} {'job':<30} {'jobs':>5} {'device':<12} {'each':>9} {'total':>9} {'SLURM':>7}  figures"]
    sources = {}
    longest = {}  # a stage's jobs are all given its longest one's time
    for r in rows:
        longest[r.model, r.stage] = max(longest.get((r.model, r.stage), 0.0), r.cold_seconds)
    for r in rows:
        how = f"{r.figures.source}; {r.figures.borrowed}" if r.figures.borrowed else \
            f"{r.figures.source}: measured on this device"
        key = sources.setdefault(how, f"[{len(sources) + 1}]")
        figures = key + (f" {r.learned}" if r.learned else "")
        slurm = f"{runtime_minutes(longest[r.model, r.stage])} min"
        lines.append(f"  {r.model:<14} {r.job[:30]:<30} {r.count:>5} {r.device.label()[:12]:<12} "
                     f"{_duration(r.seconds):>9} {_duration(r.count * r.seconds):>9} {slurm:>7}  {figures}")
    for source, key in sources.items():
        lines.append(f"  {key} {source}")
    for assumed in sorted({r.device.assumed for r in rows if r.device.assumed and r.device.kind == "gpu"}):
        lines.append(f"  ?: {assumed} (name it: the profile's gpu_model)")
    if any(r.seconds != r.cold_seconds for r in rows):
        lines.append("  each: forked from the run's warm process (forgetmap.warm); SLURM: the time a job of its own "
                     f"is given where the config leaves runtime unset (its stage's longest estimate x{MARGIN:g} "
                     f"+ {SLACK_MIN} min)")
    else:
        lines.append(f"  SLURM: the time each job is given where the config leaves runtime unset (its stage's longest "
                     f"estimate x{MARGIN:g} + {SLACK_MIN} min)")
    if any(r.lengths != "measured" for r in rows):
        lines.append("  lengths: every example taken at its max_length where its data or the base's tokenizer does "
                     "not exist yet (an upper bound)")
    if any(r.learned for r in rows):
        lines.append("  learned: the estimate x the median measured / estimated of the kind's jobs finished on its "
                     "device (their benchmark files)")
    for note in notes:
        lines.append(f"  passed over: {note}")
    totals = ", ".join(f"{v:.2f} {k}" for k, v in hours(rows).items())
    lines.append(f"  the whole plan (jobs already done included): {totals}")
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


def report(plan) -> None:
    """The time table to stderr (a dry run prints it) where some job's SLURM time comes from the estimate (a stage's
    `runtime` left unset) and the rates file has figures for the plan's devices."""
    if not estimated(plan):
        return
    try:
        rows = plan_times(plan)
    except KeyError as exc:  # no figures for a device kind at all: said, the plan goes on
        print(f"forgetmap: no time estimate: {exc.args[0]}", file=sys.stderr)
        return
    if rows:
        notes = [note for model in plan.computed for note in plan.learning_notes(model)]
        print(time_table(rows, notes), file=sys.stderr)
