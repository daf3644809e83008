"""Job times learned from the run: once jobs of a kind have finished on a device, the rest of that kind take
their time from how far the estimate missed them.

Each finished job left its `benchmark:` file (Snakemake's: the wall seconds it took) and its log, whose
`device:` line (forgetmap.models.pick_device) says where it ran. A kind's finished jobs that ran on the device
its jobs are planned on give the ratio measured / estimated (each job against its own work's estimate); once
three have finished, the kind's estimate, and the SLURM time sized on it, are the plan's times that ratio's
median, jobs forked from the run's warm process and jobs in a process of their own each learned apart (`learn`). A job that ran on
another kind of device (a CPU's job when the plan now asks for a GPU, another card than the one named) is not
learned from; a benchmark file that cannot be read is passed over, with a note in the time table.

The rows are read again whenever the benchmark files change (Snakemake asks a job's resources when the job is
ready, so a run's later jobs learn from its earlier ones: the score jobs of a late fine-tune from those of the
first) and otherwise kept, so asking every job's SLURM time reads the files once.
"""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
from pathlib import Path

from .cards import card
from .figures import Device, seconds

HEAD = 1 << 16  # the bytes of a log read for its device line
DEVICE = re.compile(r"device: (\w+)(?: \((.*?)\))?(; forked from the run's warm process)?[ \t]*$", re.MULTILINE)


def ran_on(log: str) -> tuple[str, str | None, bool] | None:
    """Where a finished job ran, from its log's `device:` line: ("cpu", its model) or ("cuda", the card's name),
    and whether it was forked from the run's warm process; None where the log says nothing of it."""
    try:
        with open(log, "rb") as handle:  # said as the job starts: its log's head holds it
            text = handle.read(HEAD).decode(errors="replace")
    except OSError:
        return None
    found = DEVICE.search(text)
    return (found.group(1), found.group(2), bool(found.group(3))) if found else None


def same_device(planned: Device, ran: tuple[str, str | None]) -> bool:
    """Whether a job that ran on `ran` ran on the device its kind is planned on: the CPU (of the same model where
    the log names it), or a GPU (the same card where the plan names one)."""
    kind, name = ran[:2]
    if planned.kind == "cpu":
        return kind == "cpu" and (name is None or planned.name is None or name == planned.name)
    if kind != "cuda":
        return False
    if planned.assumed or not name:  # no card named: whichever the jobs got is the one to learn from
        return True
    return card(name) == planned.name


def seconds_taken(path: str) -> float | None:
    """The wall seconds a benchmark file measured (its last row), None where it is absent; ValueError where it
    cannot be read."""
    if not os.path.exists(path):
        return None
    import pandas as pd

    try:
        value = float(pd.read_csv(path, sep="\t")["s"].iloc[-1])
    except Exception as exc:
        raise ValueError(f"{path}: {type(exc).__name__}") from None
    if not value > 0:
        raise ValueError(f"{path}: no seconds")
    return value


LEAST = 3  # finished jobs of a kind, started the same way, before their ratio replaces the estimate


def learn(rows: list) -> tuple[list, list[str]]:
    """`rows` (forgetmap.cost.estimate.JobTime) with each kind's time scaled by its finished jobs' median ratio,
    each job against its estimate as it ran, and the notes of benchmark files passed over. A job forked from the
    run's warm process and one started in a process of its own meet different start-ups, so each kind of start learns
    from its own jobs alone: the warm ones scale the estimate a local run goes by (`seconds`, where it forks its
    jobs), the cold ones the estimate a process of its own gets and its SLURM time is sized on (`cold_seconds`).
    Either is learned once LEAST jobs of its start have finished: one job's time (a cold cache, a busy node) moved
    a whole kind's SLURM time before."""
    notes = []
    out = []
    for row in rows:
        ratios = {False: [], True: []}  # started in a process of its own, or forked from the warm process
        for job in row.jobs:
            try:
                taken = seconds_taken(job.benchmark)
            except ValueError as exc:
                notes.append(f"{exc} (not learned from)")
                continue
            ran = ran_on(job.log) if taken is not None else None
            if ran is None or not same_device(row.device, ran):
                continue
            ratios[ran[2]].append(taken / seconds(job.work, row.figures, warm=ran[2]))
        warm_estimate = row.seconds != row.cold_seconds  # the local run forks this kind's jobs
        said, changes = [], {}
        for warm, found in ratios.items():
            if len(found) < LEAST or (warm and not warm_estimate):  # (a plan that forks nothing: warm jobs say nothing)
                continue
            ratio = statistics.median(found)
            if not warm:
                changes["cold_seconds"] = row.cold_seconds * ratio
            if warm or not warm_estimate:  # the estimate a local run goes by: its forked jobs', or its cold ones'
                changes["seconds"] = row.seconds * ratio
            said.append(f"x{ratio:.2f}{' warm' if warm else ''}, learned from {len(found)} finished "
                        f"{'forked ' if warm else ''}jobs")
        out.append(dataclasses.replace(row, **changes, learned="; ".join(said)) if changes else row)
    return out, notes


def signature(model: str) -> tuple:
    """What the model's finished jobs are, cheaply: its benchmark files' names, sizes and times."""
    root = Path("results/benchmarks") / model
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                info = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            found.append((folder, name, info.st_size, info.st_mtime_ns))
    return tuple(sorted(found))
