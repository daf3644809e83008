"""Each model job's estimated time (forgetmap.cost) against what its `benchmark:` file measured, after a run.

    python benchmarks/job_times.py --workdir .               # after `snakemake --cores 2` (the demo)
    python benchmarks/job_times.py --workdir . --rates R     # the estimates from another rates file
    python benchmarks/job_times.py --workdir . --unmeasured  # as on a CPU the rates file lacks: this CPU's own
                                                             # figures left out, another's scaled by the probe

For every job of the workdir's config that has a benchmark file (forgetmap.cost.jobs.kinds: base, fine-tunes,
score jobs, token losses, arms, the semantic and gradient analyses), the estimate the plan makes before any job has
run (its data and tokenizer exist: the lengths are measured; nothing learned from the run) and the measured
seconds; prints each job's ratio (measured / estimated) and, per kind and over all, the median ratio and the share
of jobs within 0.5-2x, and where each kind's figures came from.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import pandas as pd
import yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--rates", default=None, help="a rates file (default: the package's)")
    parser.add_argument("--unmeasured", action="store_true",
                        help="leave this CPU's own figures out of the rates (the probe scales the nearest other's)")
    args = parser.parse_args()
    rates_path = Path(args.rates).resolve() if args.rates else None
    os.chdir(args.workdir)

    from forgetmap.cost.estimate import job_times
    from forgetmap.cost.figures import seconds
    from forgetmap.cost.jobs import starts_warm
    from forgetmap.cost.learned import seconds_taken
    from forgetmap.cost.rates import cpu_key, read_rates
    from forgetmap.devices import cpu_name
    from forgetmap.plan import Plan

    config = yaml.safe_load(Path(args.config).read_text())
    rates = read_rates(rates_path)
    if args.unmeasured:
        rates["devices"].pop(cpu_key(cpu_name()), None)
    plan = Plan(config)
    rows, sources = [], {}
    for model in plan.computed:
        for kind in job_times(plan, model, rates):  # as planned, nothing learned from the run
            label = kind.job.removesuffix(" (longest)")
            sources[label] = kind.figures.borrowed or f"measured on this device ({kind.figures.source})"
            for job in kind.jobs:
                taken = seconds_taken(job.benchmark)
                if taken is not None:
                    rows.append({"kind": label.split(" shard")[0], "job": job.benchmark.split("benchmarks/", 1)[1],
                                 "measured_s": taken,
                                 "estimated_s": seconds(job.work, kind.figures, starts_warm(plan, kind.stage))})
    table = pd.DataFrame(rows)
    table["ratio"] = table["measured_s"] / table["estimated_s"]
    pd.set_option("display.width", 160)
    print(table.round(2).to_string(index=False))
    print()
    models = table[~table["kind"].isin(["predict", "semantic similarity", "gradient similarity"])]
    for kind, part in [*table.groupby("kind", sort=False), ("model jobs", models), ("all", table)]:
        within = ((part["ratio"] >= 0.5) & (part["ratio"] <= 2)).mean()
        print(f"{kind:<24} jobs {len(part):>3}  median measured/estimated {statistics.median(part['ratio']):.2f}  "
              f"within 0.5-2x {within:.0%}  measured {part['measured_s'].sum():.0f} s, "
              f"estimated {part['estimated_s'].sum():.0f} s")
    print()
    for label, source in sources.items():
        print(f"figures of {label}: {source}")


if __name__ == "__main__":
    main()
