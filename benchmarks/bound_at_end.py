"""The monitor's bound against the audit alone at the end of a fine-tune, on any map whose check tasks were
measured: the last check's weights are the fine-tune's checkpoint, whose every upstream example the matrix holds,
so the truth of every audit is known without scoring the examples at every check (benchmarks/monitor_bound.py
does that on the demo, at every check).

For each `forecast: check` task of the config: its measured row is the truth; the map is the workflow's (the fit
tasks' rows, the forecast's probes, the audit's size and strata); `--draws` audits are redrawn as the map draws
them. Per task: the bound's (the forecast weighted 1, the map's ends) mean half-width and coverage at the level;
the audit alone's (weight 0, Student's t) likewise; and the narrowest interval the audit alone gives (the level's
quantile over the draws of its own estimate's error), which the ratios are over, as BENCHMARKS.md's demo table.

    python benchmarks/bound_at_end.py --workdir ../sciwt --config config/examples/smollm2-map.yaml --model smollm2_map
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import yaml


def main() -> None:
    from forgetmap.config import fit_tasks, resolve
    from forgetmap.matrix import ForgettingMatrix
    from forgetmap.monitor import ForecastMap
    from forgetmap.predict.audit import audit_draw, two_strata
    from forgetmap.predict.bound import audit_mean, mean_bound

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--audit", type=int, default=30)
    parser.add_argument("--level", type=float, default=0.9)
    args = parser.parse_args()
    cfg = resolve(yaml.safe_load((args.workdir / args.config).read_text()))
    spec = cfg["models"][args.model]
    matrix = ForgettingMatrix.read(args.workdir / f"results/{args.model}/forgetting.parquet")
    shards = sorted(str(s) for s in (args.workdir / "results/data/upstream").glob(f"{spec['upstream']}/shard-*.parquet"))
    fit = fit_tasks(cfg, args.model)
    checks = [task for task in matrix.tasks if task not in fit]
    forecast_map = ForecastMap.from_matrix(matrix, shards, fit_tasks=fit, k=cfg["forecast"]["k"],
                                           max_length=spec["score"]["max_length"], audit=args.audit)
    known = forecast_map.known
    position = {example: i for i, example in enumerate(matrix.example_ids)}
    usable = np.array([position[example] for example in forecast_map.example_ids])
    ends = forecast_map.bound_ends(args.level)
    rows = []
    for task in checks:
        truth = matrix.row(task)[usable].astype(np.float64)
        row, _ = forecast_map.forecast(truth[known])
        mean = float(truth.mean())
        found = {"bound": [], "alone": [], "alone_error": []}
        for draw in range(args.draws):
            drawn, labels = audit_draw(forecast_map.train, known, args.audit, 10_000 + draw)
            strata = two_strata(labels)
            bound = mean_bound(row, known, truth[known], drawn, truth[drawn], args.level, ends=ends, strata=strata)
            alone = mean_bound(row, known, truth[known], drawn, truth[drawn], args.level, weight=0.0, strata=strata)
            found["bound"].append((bound.halfwidth, bound.lower <= mean <= bound.upper))
            found["alone"].append((alone.halfwidth, alone.lower <= mean <= alone.upper))
            others = audit_mean(len(truth), known, drawn, truth[drawn], strata)
            estimate = (truth[known].sum() + (len(truth) - len(known)) * others) / len(truth)
            found["alone_error"].append(abs(estimate - mean))
        narrowest = float(np.quantile(found["alone_error"], args.level))
        line = {"task": task, "mean": mean, "narrowest_alone": narrowest}
        for name in ("bound", "alone"):
            half, covered = np.asarray(found[name], dtype=np.float64).T
            line[f"{name}_halfwidth"] = float(half.mean())
            line[f"{name}_ratio"] = float(half.mean()) / narrowest
            line[f"{name}_coverage"] = float(covered.mean())
        rows.append(line)
    table = pd.DataFrame(rows)
    print(f"ends at {args.level}: {ends}; audits of {args.audit}, {args.draws} draws per task")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("mean", table.drop(columns="task").mean().round(3).to_dict())


if __name__ == "__main__":
    main()
