"""Each model job's estimated time (forgetmap.cost) against what its `benchmark:` file measured, after a run.

    python benchmarks/job_times.py --workdir .            # after `snakemake --cores 2` (the demo)
    python benchmarks/job_times.py --workdir . --rates R  # the estimates from another rates file

For every base, fine-tune, score, token-loss and arm job of the workdir's config that has a benchmark file, the
estimate the plan makes now (its data and tokenizer exist: the lengths are measured) and the measured seconds;
prints each job's ratio (measured / estimated) and, per kind and over all, the median ratio and the share of jobs
within 0.5-2x.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import pandas as pd
import yaml


def measured(path: Path) -> float | None:
    return float(pd.read_csv(path, sep="\t")["s"].iloc[-1]) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--rates", default=None, help="a rates file (default: the package's)")
    args = parser.parse_args()
    rates_path = Path(args.rates).resolve() if args.rates else None
    os.chdir(args.workdir)

    from forgetmap import cost
    from forgetmap.config.times import Model, device
    from forgetmap.plan import Plan
    from forgetmap.warm import wanted

    plan = Plan(yaml.safe_load(Path(args.config).read_text()))
    rates = cost.read_rates(rates_path)
    warm = wanted(plan)
    rows = []
    for model in plan.computed:
        m = Model(plan, model)
        bench = Path("results/benchmarks") / model

        def add(kind: str, stage: str, path: Path, work):
            fig = cost.figures(device(plan, model, stage), rates, m.parameters)
            seconds = measured(path)
            if seconds is not None:
                rows.append({"kind": kind, "job": str(path.relative_to(bench)), "measured_s": seconds,
                             "estimated_s": cost.seconds(work, fig, warm)})

        add("base", "base", bench / "base_model.tsv", m.base())
        for task in plan.finetuned[model]:
            settings = plan.finetune_settings(model, task)
            add("finetune", "finetune", bench / "finetune" / f"{task}.tsv", m.finetune(task, settings))
        scoring = plan.score_settings(model)
        for run in plan.runs(model):
            for shard in range(len(plan.shard_paths(model))):
                add("score", "score", bench / "score" / run / f"shard-{shard}.tsv", m.score(scoring, shard))
        arm_tasks = plan.mitigation.tasks(model)
        arms = plan.cfg["mitigation"]["arms"]
        for task in arm_tasks:
            if any(arm.get("tokens") for arm in arms.values()):
                losses = plan.mitigation.token_loss_settings(model, task)
                add("token losses", "score", bench / "mitigation" / "token_losses" / f"{task}.tsv",
                    m.task_scoring(task, {**scoring, **losses}, "train"))
            add("plain judged", "score", bench / "mitigation" / "none" / "matrix" / f"{task}.tsv", m.plain(task))
            for name, arm in arms.items():
                for seed in plan.cfg["mitigation"]["seeds"]:
                    add(f"arm {name}", "finetune", bench / "mitigation" / name / f"seed-{seed}" / f"{task}.tsv",
                        m.arm(name, arm, task))
    table = pd.DataFrame(rows)
    table["ratio"] = table["measured_s"] / table["estimated_s"]
    pd.set_option("display.width", 160)
    print(table.round(2).to_string(index=False))
    print()
    for kind, part in [*table.groupby("kind", sort=False), ("all", table)]:
        within = ((part["ratio"] >= 0.5) & (part["ratio"] <= 2)).mean()
        print(f"{kind:<16} jobs {len(part):>3}  median measured/estimated {statistics.median(part['ratio']):.2f}  "
              f"within 0.5-2x {within:.0%}  measured {part['measured_s'].sum():.0f} s, "
              f"estimated {part['estimated_s'].sum():.0f} s")


if __name__ == "__main__":
    main()
