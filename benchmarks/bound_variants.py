"""Other intervals for the monitor's bound, on the truths `monitor_bound.py` saved (BENCHMARKS.md; issue: coverage at
the level on a heavy tail).

After `python benchmarks/monitor_bound.py --workdir . --seeds 3 --truths truths.npz`: at each saved check of each run,
`--draws` draws of `--audit` examples (uniform, from the usable examples that are not probes), and for the mean and
for the shares forgotten by more than 0.2 and 0.5 nats per token, each weight on the forecast (1: the monitor's;
0: the sample alone; tuned: forgetmap.predict.bound's `tuned_weights`; tuned and clipped to [0, 1]) with Student's
t or a bootstrap-t (999 resamples of the corrected values) interval; for the shares also the exact binomial
(Clopper-Pearson) interval on the audit's own count and the monitor's own (`share_bound`: weight 1, its spread with
half a pseudo-example of each (measured, forecast) pair); for the mean also Hall's (1992) skewness-removing
transformation of t, with the audit's own skewness or with the map's (the median skewness of the fit tasks'
leave-one-task-out residuals: known before the run), and an audit drawn as the map draws it, by two strata of the
fit tasks' mean |Z| per example (forgetmap.predict.audit: the top 10 % and the rest, Neyman's allocation; the
stratified estimate, forgetmap.predict.bound), with t or with Hall's at each stratum's skewness (the monitor's), the
shares too (`share_bound` by strata, the monitor's), and the stratified audit alone (weight 0) with t, or held to
the level the same way, Hall's at each stratum's skewness of the fit rows' values, and the weight tuned within the
strata (t, or Hall's at the monitor's skewness); and, for a run's
width against the sample's own, Hall's interval for the sample alone (weight 0) at the map's skewness of the values
themselves, and for the tuned weight at the map's skewness of z - λ ẑ at the weight tuned (the folds' median at
each λ); and the audit folded into the completion (cross-prediction, Zrnic & Candès 2024): the audit split into
`--folds` folds, each fold's residuals from the forecast made from the probes and the other folds, the unmeasured
examples' forecast the folds' mean, t and Hall at the map's skewness. Printed: coverage at `--level` and mean
half-width; per task, each mean bound's half-width over the sample's own t-interval's and its coverage; and per task,
over every check, what decides a weight's width: the slope of the values on the forecast, the spread of z - ẑ over
z's, and the most any estimate from the map can narrow an interval: the R² of z on every covariate the map holds for
each example (the forecast, the fit tasks' mean, the base's NLL, the fit rows' first three right singular vectors),
fitted on the whole population itself (no sample could do better than √(1 - R²)). `--audit 60`: the same with a
larger audit.

    python benchmarks/bound_variants.py --workdir . --truths truths.npz --draws 60   # after monitor_bound.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hall import fold_skewness, hall_bound, hall_quantiles  # noqa: E402
from monitor import demo_setup  # noqa: E402


def main() -> None:
    from scipy.stats import t as student

    from scipy.stats import skew

    from forgetmap.predict.audit import audit_draw
    from forgetmap.predict.bound import binomial_interval, mean_bound, share_bound, tuned_weights
    from forgetmap.predict.conformal import fold_predictions

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--truths", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=60)
    parser.add_argument("--audit", type=int, default=30)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--folds", type=int, default=5, help="the audit's folds for the cross-fitted completion")
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

    # known before any run: the fit tasks' leave-one-task-out residuals (their skewness)
    model = forecast_map.completion()[0]
    folds = [(forecast_map.train[row][rest].astype(np.float64), predicted[rest].astype(np.float64)) for row, predicted
             in fold_predictions(forecast_map.train, known, model, forecast_map.method, forecast_map.params)]
    grid = np.linspace(-0.5, 4, 91)  # the folds' median skewness of z - λ ẑ at each weight λ
    skew_at_weight = np.array([np.median([skew(v - w * (f - f.mean()), bias=False) for v, f in folds]) for w in grid])
    map_skew = fold_skewness(forecast_map.train, known, model, forecast_map.method, forecast_map.params)
    strata_skew = fold_skewness(forecast_map.train, known, model, forecast_map.method, forecast_map.params,
                                forecast_map.strata)  # one per stratum of the map's audit (what the monitor takes)
    strata = audit_draw(forecast_map.train, known, m, 0)[1]
    value_skew = [float(np.median([skew(values[strata[rest] == h], bias=False) for values, _ in folds]))
                  for h in (0, 1)]  # each stratum's skewness of the fit rows' values themselves (no forecast)
    centred = forecast_map.train - forecast_map.train.mean(axis=0)
    covariates = np.column_stack([np.ones(len(rest)), forecast_map.train[:, rest].mean(axis=0),
                                  forecast_map.base_nll[rest], np.linalg.svd(centred, full_matrices=False)[2][:3, rest].T])
    print(f"the map's residual skewness {map_skew:.2f} (of the values themselves "
          f"{np.interp(0.0, grid, skew_at_weight):.2f}); its strata {np.bincount(strata[strata >= 0]).tolist()} "
          f"examples, skewness {np.round(strata_skew, 2).tolist()}")

    def hall(d, gamma):  # the monitor's interval: Hall's (1992) transformation of t (forgetmap.predict.bound)
        up, down = hall_quantiles(level, m, gamma)
        se = d.std(ddof=1) / np.sqrt(m) * fpc
        return d.mean() - down * se, d.mean() + up * se

    def by_strata(z, row, probes, over=None, gamma=None, weight=1.0):  # the map's draw (forgetmap.predict.audit)
        drawn = audit_draw(forecast_map.train, known, m, int(rng.integers(1 << 31)))[0]
        bound = hall_bound(row, known, z[known], drawn, z[drawn], level, gamma, weight, strata=strata) \
            if over is None else share_bound(row, known, z[known], drawn, z[drawn], over, level, strata=strata)
        return (np.array([bound.lower, bound.upper]) * n - probes) / (n - k)  # the others' mean's interval

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

    def cross_fitted(z, drawn):  # (estimate of the others' mean, sd of the cross-fitted residuals)
        residuals, mean_forecast = np.empty(m), np.zeros(n)
        for fold in np.array_split(rng.permutation(m), args.folds):
            inputs = np.sort(np.concatenate([known, np.delete(drawn, fold)]))
            predicted = model.predict(inputs[None, :], z[inputs][None, :].astype(np.float64))[0].astype(np.float64)
            residuals[fold] = z[drawn[fold]] - predicted[drawn[fold]]
            mean_forecast += predicted / args.folds
        unmeasured = np.setdiff1d(rest, drawn)
        estimate = (z[drawn].sum() + len(unmeasured) * (mean_forecast[unmeasured].mean() + residuals.mean())) / (n - k)
        return estimate, residuals.std(ddof=1)

    for task, truths in zip(saved["tasks"], saved["truths"]):
        for z in truths:
            row = forecast_map.forecast(z[known])[0].astype(np.float64)
            shifted = row[rest] - row[rest].mean()
            fitted = np.linalg.lstsq(np.column_stack([covariates, row[rest]]), z[rest], rcond=None)[0]
            population.append((task, float(np.cov(z[rest], shifted)[0, 1] / shifted.var(ddof=1)),
                               float((z[rest] - shifted).std() / z[rest].std()),
                               float(1 - np.var(z[rest] - np.column_stack([covariates, row[rest]]) @ fitted)
                                     / np.var(z[rest]))))
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
                        add(f"{tag}: weight 1, paired spread, two strata (share_bound, the monitor's)",
                            *by_strata(z, row, probes, over=over), probes, truth)
                    else:
                        corrected = values[drawn] - (forecast[drawn] - centre)
                        add(f"{tag}: weight 1, Hall, the audit's skewness",
                            *hall(corrected, skew(corrected, bias=False)), probes, truth)
                        add(f"{tag}: weight 1, Hall, the map's skewness", *hall(corrected, map_skew), probes, truth)
                        add(f"{tag}: weight 1, t, two strata of the map's mean |Z|", *by_strata(z, row, probes),
                            probes, truth)
                        add(f"{tag}: weight 1, Hall, two strata, each stratum's skewness (the monitor's)",
                            *by_strata(z, row, probes, gamma=strata_skew), probes, truth)
                        add(f"{tag}: weight 0, Hall, two strata, each stratum's skewness of the values",
                            *by_strata(z, row, probes, gamma=value_skew, weight=0.0), probes, truth)
                        add(f"{tag}: weight 0, t, two strata", *by_strata(z, row, probes, weight=0.0), probes, truth)
                        add(f"{tag}: weight tuned, t, two strata", *by_strata(z, row, probes, weight="tuned"),
                            probes, truth)
                        add(f"{tag}: weight tuned, Hall, two strata, each stratum's skewness", *by_strata(
                            z, row, probes, gamma=strata_skew, weight="tuned"), probes, truth)
                        add(f"{tag}: weight 0, Hall, the map's skewness of the values", *hall(
                            values[drawn], float(np.interp(0.0, grid, skew_at_weight))), probes, truth)
                        corrected = values[drawn] - tuned * (forecast[drawn] - centre)
                        add(f"{tag}: weight tuned, Hall, the map's skewness at the weight", *hall(
                            corrected, float(np.interp(tuned.mean(), grid, skew_at_weight))), probes, truth)
                        estimate, spread = cross_fitted(z, drawn)
                        se = spread / np.sqrt(m) * fpc
                        q = student.ppf((1 + level) / 2, m - 1)
                        add(f"{tag}: weight 1, cross-fitted, t", estimate - q * se, estimate + q * se, probes, truth)
                        up, down = hall_quantiles(level, m, map_skew)
                        add(f"{tag}: weight 1, cross-fitted, Hall, the map's skewness", estimate - down * se,
                            estimate + up * se, probes, truth)
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
    facts = pd.DataFrame(population, columns=["task", "slope of z on the forecast", "sd(z - forecast) / sd(z)",
                                              "R² on every covariate (the population's own fit)"])
    print("\nper task, over its checks (every example that is not a probe):")
    print(facts.groupby("task").mean().to_string(float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
