"""What the monitor's headline reads, against the truth at every check (issue 69; docs/monitor.md; BENCHMARKS.md).

After `monitor_bound.py --truths truths.npz` (the demo's `check` tasks fine-tuned as the demo fine-tunes them, the
whole upstream set scored every `--every` steps): at each check, from the probes' true values,

1. the forecast at 0 where nothing has changed (every probe's change 0), and its RMSE against the measured row over
   the examples that are not probes at the checks nearest 20 %, 50 % and 100 % of the steps, for the matrix
   factorization's fold-in through the origin (`origin`, the forecast's default now) and the plain fold-in (the
   forecast before), side by side;
2. the bound on the mean at `--level` over `--draws` audits drawn as the map draws them (by two strata, each draw
   its own seed), the origin's forecast weighted 1 with three ends: the map's own studentized ends (the monitor's
   now: forgetmap.predict.ends, audits drawn as the map's on each fit task's leave-one-task-out row, how far the
   estimate fell from that row's mean in t-interval half-widths), Hall's transformation at the map's residual
   skewness (the monitor's before), and Student's t's; beside them the plain fold-in's forecast with Hall's
   (before that) and the origin's weighted by the probes' cross-fitted weight (`probe_weight`) with the map's ends.
   Coverage and mean half-width against the narrowest interval the audit examples alone could give at the level
   (the `--level` quantile over the draws of |the audit's own stratified estimate - the true mean|), per task;
3. in hindsight, on the same draws, the narrowest ends (multiples of t's half-width) holding 0.89 on every task,
   each task's own and one pair for all: what no ends known before a run can beat (`hindsight`).

    python benchmarks/monitor_headline.py --workdir . --truths truths.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hall import hall_bound, map_skew  # noqa: E402
from monitor import demo_setup  # noqa: E402

SHARES = (0.2, 0.5, 1.0)


def refitted(forecast_map, **params):
    """The map with other parameters for its completion (fitted again on first use)."""
    return dataclasses.replace(forecast_map, params={**forecast_map.params, **params}, _completion=None, _folds=None,
                               _mean_widths=None, _ends={})


def probe_weight(forecast_map, values: np.ndarray) -> float:
    """The forecast's weight in the bound chosen from the probes alone by cross-fitting: each probe's value
    forecast from the other k - 1, and the least-squares slope of the measured values on those forecasts (about
    their means), clipped to [0, 1]. It never sees an audit example, so the audit bounds the estimate it weights
    as honestly as at a fixed weight (forgetmap.predict.bound)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    k = len(values)
    model, _ = forecast_map.completion()
    others = np.array([np.delete(np.arange(k), j) for j in range(k)])  # (k, k - 1): each probe left out in turn
    held = model.predict(forecast_map.known[others], values[others])[np.arange(k), forecast_map.known]
    centred = held.astype(np.float64) - held.mean()
    spread = float(centred @ centred)
    if spread <= 1e-12 * max(float(np.abs(held).max()) ** 2, 1e-300) * k:
        return 0.0
    return float(np.clip(centred @ (values - values.mean()) / spread, 0.0, 1.0))


def rmse(row: np.ndarray, truth: np.ndarray, hidden: np.ndarray) -> float:
    return float(np.sqrt(np.mean((row[hidden] - truth[hidden]) ** 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--truths", type=Path, required=True, help="monitor_bound.py's --truths file")
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--audit", type=int, default=60)
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    from forgetmap.predict.audit import audit_draw, two_strata
    from forgetmap.predict.bound import mean_bound

    saved = np.load(args.truths)
    tasks = [str(t) for t in saved["tasks"]]
    origin = demo_setup(args.workdir, args.model, tasks[0])[-1]
    maps = {"through the origin (now)": refitted(origin, origin=True),
            "plain fold-in (before)": refitted(origin, origin=False)}
    known = origin.known
    hidden = np.ones(len(origin.example_ids), dtype=bool)
    hidden[known] = False
    steps = np.asarray(saved["steps"])
    total = steps[-1]
    print("1. the forecast where every probe's change is 0 (mean over the examples):")
    for name, forecast_map in maps.items():
        print(f"   {name}: {float(forecast_map.forecast(np.zeros(len(known)))[0].mean()):+.4f}")
    accuracy, bounds = [], []
    skew = map_skew(maps["through the origin (now)"])
    plain_skew = map_skew(maps["plain fold-in (before)"])
    draws = [audit_draw(origin.train, known, args.audit, d) for d in range(args.draws)]
    # the map's ends for audits of --audit drawn by its strata (its completion as fitted above)
    ends = dataclasses.replace(maps["through the origin (now)"], audit=draws[0][0], strata=two_strata(draws[0][1]),
                               _ends={}).bound_ends(args.level)
    print(f"   the map's studentized ends at {args.level}: up {ends[0]:.3f}, down {ends[1]:.3f} t half-widths")
    for task, seed, truth in zip(tasks, saved["seeds"], saved["truths"]):
        for share in SHARES:
            c = int(np.argmin(np.abs(steps / total - share)))
            line = {"task": task, "seed": int(seed), "share": share, "step": int(steps[c])}
            for name, forecast_map in maps.items():
                line[name] = rmse(forecast_map.forecast(truth[c][known])[0], truth[c], hidden)
            line["probes' mean (naive)"] = rmse(np.full(len(truth[c]), truth[c][known].mean()), truth[c], hidden)
            accuracy.append(line)
        for c, z in enumerate(truth):
            row, before = (forecast_map.forecast(z[known])[0] for forecast_map in maps.values())
            weight = probe_weight(maps["through the origin (now)"], z[known])
            mean = float(z.mean())
            for drawn, strata in draws:
                labels = two_strata(strata)
                found = {
                    "origin, weight 1, the map's ends (now)": mean_bound(row, known, z[known], drawn, z[drawn],
                                                                         args.level, ends=ends, strata=labels),
                    "origin, weight 1, Hall's (before)": hall_bound(row, known, z[known], drawn, z[drawn], args.level,
                                                                    skew, strata=labels),
                    "origin, weight 1, t's ends": mean_bound(row, known, z[known], drawn, z[drawn], args.level,
                                                             strata=labels),
                    "plain fold-in, weight 1, Hall's": hall_bound(before, known, z[known], drawn, z[drawn], args.level,
                                                                  plain_skew, strata=labels),
                    "probes' weight, the map's ends": mean_bound(row, known, z[known], drawn, z[drawn], args.level,
                                                                 weight=weight, ends=ends, strata=labels)}
                alone = mean_bound(row, known, z[known], drawn, z[drawn], args.level, weight=0.0, strata=labels)
                t_ends = found["origin, weight 1, t's ends"]
                record = {"task": task, "seed": int(seed), "step": int(steps[c]), "weight": weight,
                          "alone_error": abs(alone.estimate - mean),
                          "weight 1 ratio": (t_ends.estimate - mean) / t_ends.halfwidth, "weight 1 h": t_ends.halfwidth,
                          "weight 0 ratio": (alone.estimate - mean) / alone.halfwidth, "weight 0 h": alone.halfwidth}
                for name, bound in found.items():
                    record[f"{name} half"] = (bound.upper - bound.lower) / 2
                    record[f"{name} covered"] = float(bound.lower <= mean <= bound.upper)
                bounds.append(record)
    table = pd.DataFrame(accuracy)
    pd.set_option("display.width", 200)
    print("\n1. RMSE against the measured row over the examples that are not probes (mean over tasks and seeds):")
    print(table.groupby("share")[[*maps, "probes' mean (naive)"]].mean().to_string(float_format=lambda v: f"{v:.4f}"))
    print("\n   by task, at 20 % / 50 % / 100 %:")
    print(table.pivot_table(index="task", columns="share", values=list(maps)).to_string(
        float_format=lambda v: f"{v:.4f}"))
    frame = pd.DataFrame(bounds)
    # the narrowest interval the audit alone gives at the level: per check, the level's quantile of its error
    narrowest = frame.groupby(["task", "seed", "step"])["alone_error"].quantile(args.level).rename("narrowest")
    frame = frame.join(narrowest, on=["task", "seed", "step"])
    names = list(found)
    rows = []
    for task, part in frame.groupby("task"):
        line = {"task": task, "weight chosen": part["weight"].mean(), "narrowest": part["narrowest"].mean()}
        for name in names:
            line[f"{name}: width / narrowest"] = (part[f"{name} half"] / part["narrowest"]).mean()
            line[f"{name}: coverage"] = part[f"{name} covered"].mean()
        rows.append(line)
    print(f"\n2. the bound at {args.level} with {args.audit} audit examples, {args.draws} draws per check (half-width "
          f"over the narrowest the audit alone gives at the level, mean over the checks):")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    hindsight(frame, args.level)


def shortest(ratios: np.ndarray, cover: float) -> tuple[float, float]:
    """The shortest window [low, high] holding `cover` of the ratios."""
    ratios = np.sort(ratios)
    n = len(ratios)
    k = int(np.ceil(cover * n))
    i = int(np.argmin(ratios[k - 1:] - ratios[:n - k + 1]))
    return float(ratios[i]), float(ratios[i + k - 1])


def hindsight(frame: pd.DataFrame, level: float, cover: float = 0.89) -> None:
    """3. The narrowest any interval est ± fixed multiples of t's half-width could be while covering `cover` on every
    task, the multiples chosen in hindsight on these very draws: each task's own (the shortest window of its
    (estimate - mean) / h), and one pair for every task (a grid over (down, up), the widest task's width least).
    Neither is a method (both see the truth); they bound what any ends known before the run can reach."""
    print(f"\n3. in hindsight, ends holding {cover} on every task at weight 1 and weight 0 (the audit alone):")
    grid = np.arange(0.5, 2.0, 0.01)
    for weight in ("weight 1", "weight 0"):
        parts = {task: (part[f"{weight} ratio"].to_numpy(), (part[f"{weight} h"] / part["narrowest"]).mean())
                 for task, part in frame.groupby("task")}
        own = {task: (lambda w: (w[1] - w[0]) / 2 * scale)(shortest(r, cover)) for task, (r, scale) in parts.items()}
        best = None
        for down in grid:  # the truth inside when -up <= (estimate - mean) / h <= down
            covered = {task: [np.mean((r >= -up) & (r <= down)) for up in grid] for task, (r, _) in parts.items()}
            for j, up in enumerate(grid):
                if min(c[j] for c in covered.values()) >= cover:
                    worst = max((down + up) / 2 * scale for _, scale in parts.values())
                    if best is None or worst < best[0]:
                        best = (worst, down, up)
                    break  # a longer upper end only widens
        print(f"   {weight}: each task's own ends, width / narrowest: "
              + ", ".join(f"{task} {w:.3f}" for task, w in own.items()))
        if best is not None:
            print(f"   {weight}: one pair for every task (down {best[1]:.2f}, up {best[2]:.2f}): the widest task "
                  f"{best[0]:.3f}")


if __name__ == "__main__":
    main()
