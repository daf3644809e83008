"""Other intervals for the monitor's bound, on the truths `monitor_bound.py` saved (BENCHMARKS.md; issue: coverage at
the level on a heavy tail).

After `python benchmarks/monitor_bound.py --workdir . --seeds 3 --truths truths.npz`: at each saved check of each run,
`--draws` draws of 30 audit examples (uniform, from the usable examples that are not probes), and for the mean and
for the shares forgotten by more than 0.2 and 0.5 nats per token, each weight on the forecast (1: the monitor's;
0: the sample alone; tuned: forgetmap.predict.bound's `tuned_weights`; tuned and clipped to [0, 1]) with Student's
t or a bootstrap-t (999 resamples of the corrected values) interval; for the shares also the exact binomial
(Clopper-Pearson) interval on the audit's own count and the monitor's own (`share_bound`: weight 1, its spread with
half a pseudo-example of each (measured, forecast) pair); for the mean also Hall's (1992) skewness-removing
transformation of t, with the audit's own skewness or with the map's (the median skewness of the fit tasks'
leave-one-task-out residuals: known before the run), and an audit drawn by two strata of the fit tasks' mean |Z|
per example (the top `--stratum` share, default 10 %, and the rest; Neyman's allocation from the leave-one-task-out
residuals' spread in each, a stratified estimate with Welch-Satterthwaite's degrees of freedom); and, for a run's
width against the sample's own, Hall's interval for the sample alone (weight 0) at the map's skewness of the values
themselves, and for the tuned weight at the map's skewness of z - λ ẑ at the weight tuned (the folds' median at
each λ). Printed: coverage at `--level` and mean half-width; per task, each mean bound's half-width over the
sample's own t-interval's and its coverage; and per task, over every check, what decides a weight's width: the slope
of the values on the forecast and the spread of z - ẑ over z's. `--audit 60`: the same with a larger audit.

    python benchmarks/bound_variants.py --workdir . --truths truths.npz --draws 60   # after monitor_bound.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from monitor import demo_setup  # noqa: E402


def main() -> None:
    from scipy.stats import t as student

    from scipy.stats import skew

    from forgetmap.predict.bound import binomial_interval, hall_quantiles, share_bound, tuned_weights
    from forgetmap.predict.conformal import fold_predictions

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--truths", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=60)
    parser.add_argument("--audit", type=int, default=30)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--stratum", type=float, default=0.1, help="the top stratum's share of the examples")
    args = parser.parse_args()
    saved = np.load(args.truths)
    forecast_map = demo_setup(args.workdir, args.model, str(saved["tasks"][0]))[-1]
    known = forecast_map.known
    n, k, m, level = len(forecast_map.example_ids), len(known), args.audit, args.level
    rest = np.setdiff1d(np.arange(n), known)
    fpc = np.sqrt(1 - m / (n - k))
    rng = np.random.default_rng(0)

    def t_interval(d):
        half = student.ppf((1 + level) / 2, m - 1) * d.std(ddof=1) / np.sqrt(m) * fpc
        return d.mean() - half, d.mean() + half

    # known before any run: the fit tasks' leave-one-task-out residuals (their skewness; each stratum's spread)
    model = forecast_map.completion()[0]
    folds = [(forecast_map.train[row][rest].astype(np.float64), predicted[rest].astype(np.float64)) for row, predicted
             in fold_predictions(forecast_map.train, known, model, forecast_map.method, forecast_map.params)]
    residuals = np.stack([values - predicted for values, predicted in folds])
    grid = np.linspace(-0.5, 4, 91)  # the folds' median skewness of z - λ ẑ at each weight λ
    skew_at_weight = np.array([np.median([skew(v - w * (f - f.mean()), bias=False) for v, f in folds]) for w in grid])
    map_skew = forecast_map.residual_skew()  # what the monitor's interval takes
    score = np.abs(forecast_map.train[:, rest]).mean(axis=0)
    top = score > np.quantile(score, 1 - args.stratum)
    strata = [np.flatnonzero(~top), np.flatnonzero(top)]
    spreads = np.array([residuals[:, s].std(axis=1).mean() for s in strata])
    shares = np.array([len(s) for s in strata]) / len(rest)
    n_top = int(np.clip(round(m * shares[1] * spreads[1] / (shares * spreads).sum()), 3, m - 3))
    sizes = [m - n_top, n_top]
    print(f"the map's residual skewness {map_skew:.2f} (of the values themselves "
          f"{np.interp(0.0, grid, skew_at_weight):.2f}); strata of {[len(s) for s in strata]} examples, audit {sizes}")

    def hall(d, gamma):  # the monitor's interval: Hall's (1992) transformation of t (forgetmap.predict.bound)
        up, down = hall_quantiles(level, m, gamma)
        se = d.std(ddof=1) / np.sqrt(m) * fpc
        return d.mean() - down * se, d.mean() + up * se

    def stratified(values, forecast):  # weight 1 within each stratum; the others' mean and its interval
        parts = [rng.choice(s, size, replace=False) for s, size in zip(strata, sizes)]
        means = [np.mean(values[rest[p]] - forecast[rest[p]]) for p in parts]
        terms = [shares[h] ** 2 * np.var(values[rest[p]] - forecast[rest[p]], ddof=1) / len(p)
                 * (1 - len(p) / len(strata[h])) for h, p in enumerate(parts)]
        variance = sum(terms)
        df = variance ** 2 / sum(t * t / (len(p) - 1) for t, p in zip(terms, parts)) if variance > 0 else m - 1
        centre = forecast[rest].mean() + float(np.dot(shares, means))
        half = student.ppf((1 + level) / 2, df) * np.sqrt(variance)
        return centre - half, centre + half

    def bootstrap_t(d):
        resampled = d[rng.integers(0, m, size=(999, m))]
        se = d.std(ddof=1) / np.sqrt(m)
        with np.errstate(divide="ignore", invalid="ignore"):
            stats = (resampled.mean(1) - d.mean()) / (resampled.std(1, ddof=1) / np.sqrt(m))
        stats = stats[np.isfinite(stats)]
        if se == 0 or len(stats) < 10:
            return d.mean(), d.mean()
        low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
        return d.mean() - high * se * fpc, d.mean() - low * se * fpc

    found: dict = {}

    by_task: dict = {}
    population: list = []

    def add(name, low, high, probes, truth):  # the others' interval made the mean's over all n
        low, high = (probes + (n - k) * low) / n, (probes + (n - k) * high) / n
        found.setdefault(name, []).append((low <= truth <= high, (high - low) / 2))
        if name.startswith("mean"):
            by_task.setdefault((task, name), []).append((low <= truth <= high, (high - low) / 2))

    for task, truths in zip(saved["tasks"], saved["truths"]):
        for z in truths:
            row = forecast_map.forecast(z[known])[0].astype(np.float64)
            shifted = row[rest] - row[rest].mean()
            population.append((task, float(np.cov(z[rest], shifted)[0, 1] / shifted.var(ddof=1)),
                               float((z[rest] - shifted).std() / z[rest].std())))
            for over in (None, 0.2, 0.5):
                values, forecast = (z, row) if over is None else ((z > over) * 1.0, (row > over) * 1.0)
                tag, truth, centre = ("mean" if over is None else f"share over {over:g}", values.mean(),
                                      forecast[rest].mean())
                probes = values[known].sum()
                for _ in range(args.draws):
                    drawn = np.sort(rng.choice(rest, m, replace=False))
                    tuned = tuned_weights(values[drawn], forecast[drawn])
                    for weight, lam in (("1", np.ones(m)), ("0", np.zeros(m)), ("tuned", tuned),
                                        ("tuned, at most 1", np.minimum(tuned, 1.0))):
                        corrected = values[drawn] - lam * (forecast[drawn] - centre)
                        add(f"{tag}: weight {weight}, t", *t_interval(corrected), probes, truth)
                        add(f"{tag}: weight {weight}, bootstrap-t", *bootstrap_t(corrected), probes, truth)
                    if over is not None:
                        exact = binomial_interval(int(values[drawn].sum()), m, level)
                        add(f"{tag}: the audit's count, exact binomial", exact.lower, exact.upper, probes, truth)
                        own = share_bound(row, known, z[known], drawn, z[drawn], over, level)
                        add(f"{tag}: weight 1, paired spread (share_bound)", *(np.array([own.lower, own.upper]) * n
                                                                                 - probes) / (n - k), probes, truth)
                    else:
                        corrected = values[drawn] - (forecast[drawn] - centre)
                        add(f"{tag}: weight 1, Hall, the audit's skewness",
                            *hall(corrected, skew(corrected, bias=False)), probes, truth)
                        add(f"{tag}: weight 1, Hall, the map's skewness", *hall(corrected, map_skew), probes, truth)
                        add(f"{tag}: weight 1, t, two strata of the map's mean |Z|",
                            *stratified(values, forecast), probes, truth)
                        add(f"{tag}: weight 0, Hall, the map's skewness of the values", *hall(
                            values[drawn], float(np.interp(0.0, grid, skew_at_weight))), probes, truth)
                        corrected = values[drawn] - tuned * (forecast[drawn] - centre)
                        add(f"{tag}: weight tuned, Hall, the map's skewness at the weight", *hall(
                            corrected, float(np.interp(tuned.mean(), grid, skew_at_weight))), probes, truth)
    print(f"{len(saved['truths'])} runs x {saved['truths'].shape[1]} checks x {args.draws} draws of {m}, level {level}")
    for name in sorted(found):
        covered, half = np.asarray(found[name]).T
        print(f"{name:52s} covers {covered.mean():.3f}  half-width {half.mean():.4f}")
    import pandas as pd

    table = pd.DataFrame([(task, name.removeprefix("mean: "), *np.mean(v, axis=0)) for (task, name), v in
                          by_task.items()], columns=["task", "bound", "covers", "halfwidth"])
    sample = table[table["bound"] == "weight 0, t"].set_index("task")["halfwidth"]
    table["over the sample's t"] = table["halfwidth"] / table["task"].map(sample)
    pd.set_option("display.width", 200)
    print("\nper task, the mean's bounds: half-width over the sample's own t-interval's, and coverage")
    print(table.pivot(index="bound", columns="task", values="over the sample's t").to_string(float_format=lambda v: f"{v:.2f}"))
    print(table.pivot(index="bound", columns="task", values="covers").to_string(float_format=lambda v: f"{v:.3f}"))
    facts = pd.DataFrame(population, columns=["task", "slope of z on the forecast", "sd(z - forecast) / sd(z)"])
    print("\nper task, over its checks (every example that is not a probe):")
    print(facts.groupby("task").mean().to_string(float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
