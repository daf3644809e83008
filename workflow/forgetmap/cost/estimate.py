"""How long each job of the plan takes, before any is submitted: one row per kind of job of a model, its count, its
device, its longest job's work and seconds, and the figures they come from (forgetmap.cost.figures); a job's SLURM
time where the config leaves a stage's `runtime` unset (its stage's longest estimate x MARGIN + SLACK_MIN minutes, x
the attempt); and the plan's device-hours. The rows are estimated once per plan (forgetmap.plan's `job_times`), which
scales them by the run's finished jobs (forgetmap.cost.learned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .figures import Device, figures, probe_where, seconds
from .jobs import Model, device, kinds, starts_warm
from .rates import Figures, read_rates
from .work import Work

# the jobs whose resources are each stage's (rules/common.smk's STAGE_RULES): their estimate sets the stage's runtime
TIMED_STAGES = ("base", "finetune", "score", "semantic", "gradient")
MARGIN = 1.5  # what a job's time limit allows over its estimate (the rates' spread between runs and machines)
SLACK_MIN = 5  # and minutes on top: queue start, a node's cold file cache


@dataclass
class JobTime:
    """One kind of job of a model: how many, its device, its work, the seconds of one and where they come from."""

    model: str
    stage: str
    job: str
    count: int
    device: Device
    work: Work
    seconds: float  # as the run goes: forked from a warm server where a local run has one (forgetmap.warm)
    figures: Figures
    lengths: str  # "measured" or "at most max_length"
    cold_seconds: float  # in a process of its own (a cluster job): what its SLURM time is sized on
    jobs: tuple = ()  # each job of the kind (forgetmap.cost.jobs.Job): where a finished one's time is read
    learned: str | None = None  # how the run's finished jobs changed the estimate (forgetmap.cost.learned)


def job_times(plan, model: str, rates: dict | None = None) -> list[JobTime]:
    """The model's jobs on devices, one row per kind (its longest job's time), before any has run."""
    rates = rates if rates is not None else read_rates()
    m = Model(plan, model)
    rows = []
    for stage, label, jobs in kinds(plan, model, m):
        if not jobs:
            continue
        where = device(plan, model, stage)
        fig = figures(where, rates, m.parameters, probe_where(where, rates, plan.cluster, plan.partition_probe()))
        longest = max((job.work for job in jobs), key=_flops)
        several = stage == "finetune" and not label.startswith("arm") and len(jobs) > 1
        rows.append(JobTime(model, stage, f"{label} (longest)" if several else label, len(jobs), where, longest,
                            seconds(longest, fig, starts_warm(plan, stage)), fig,
                            "at most max_length" if m.lengths.bounded else "measured", seconds(longest, fig),
                            tuple(jobs)))
    return rows


def _flops(work: Work) -> float:
    return sum(work.flops.values()) + sum(work.passes.values())


def plan_times(plan) -> list[JobTime]:
    return [row for model in plan.computed for row in plan.job_times(model)]


def runtime(plan, model: str, stage: str, attempt: int = 1) -> int:
    """SLURM --time of a stage's job where the config leaves `runtime` unset: its kind's longest estimate with
    MARGIN (x the attempt)."""
    return runtime_minutes(stage_estimate(plan, model, stage), attempt)


def stage_estimate(plan, model: str, stage: str) -> float:
    """The longest estimate of a stage's jobs, in a process of its own (what its SLURM time is sized on)."""
    return max((r.cold_seconds for r in plan.job_times(model) if r.stage == stage), default=0.0)


def estimated(plan, cpu_only: bool = False) -> bool:
    """Whether some model leaves a timed stage's `runtime` to the estimate (`cpu_only`: a stage without GPUs)."""
    return any(resources["runtime"] is None and not (cpu_only and resources["gpu"])
               for m in plan.computed for stage in TIMED_STAGES
               for resources in [plan.cfg["models"][m]["resources"][stage]])


def hours(rows: list[JobTime]) -> dict[str, float]:
    """Device-hours of the plan: GPU-hours by kind of card (each GPU a job holds counted), and CPU-hours."""
    totals: dict[str, float] = {}
    for r in rows:
        key = f"{r.device.label().rsplit(' x', 1)[0]} GPU-hours" if r.device.kind == "gpu" else "CPU core-hours"
        totals[key] = totals.get(key, 0.0) + r.count * r.seconds * r.device.count / 3600
    return totals


def runtime_minutes(estimate_s: float, attempt: int = 1) -> int:
    """SLURM's --time for a job estimated at `estimate_s`: the estimate x MARGIN plus SLACK minutes, whole
    minutes, x the attempt (a retry of a job that ran out gets twice, then three times)."""
    return math.ceil((estimate_s * MARGIN / 60 + SLACK_MIN)) * attempt
