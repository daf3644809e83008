"""Paired statistics for mitigation arms over (task, seed) pairs (the paper claims significance without
code for it; this is the test its data supports).

For paired values x (an arm) and y (its comparison) with differences d = x - y (rates of discrete
outcomes: the exact differences of their counts, `rate_differences`, so equal differences tie):
- `wilcoxon`: the two-sided Wilcoxon signed-rank test (scipy; zero differences dropped, as Wilcoxon).
- `hodges_lehmann`: the median of the Walsh averages (d_i + d_j) / 2, i <= j: the location estimate
  that goes with the signed-rank test.
- `bootstrap_interval`: a percentile interval of the Hodges-Lehmann estimate resampling *tasks* (all
  seeds of a task stay together), so the interval speaks about new tasks, not new seeds.
- `rank_biserial`: the matched-pairs rank-biserial correlation, (R+ - R-) / (R+ + R-) over the ranks
  of |d| (zero differences dropped): +1 when every difference is positive.
"""

from __future__ import annotations

import numpy as np


def hodges_lehmann(d: np.ndarray) -> float:
    d = np.asarray(d, dtype=np.float64)
    if len(d) == 0:
        return float("nan")
    i, j = np.triu_indices(len(d))
    return float(np.median((d[i] + d[j]) / 2))


def rank_biserial(d: np.ndarray) -> float:
    from scipy.stats import rankdata

    d = np.asarray(d, dtype=np.float64)
    d = d[d != 0]
    if len(d) == 0:
        return float("nan")
    ranks = rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def wilcoxon(d: np.ndarray) -> tuple[float, float]:
    """(statistic, two-sided p) of the signed-rank test of d; NaN when every difference is zero."""
    from scipy.stats import wilcoxon as scipy_wilcoxon

    d = np.asarray(d, dtype=np.float64)
    if len(d) == 0 or not np.any(d != 0):
        return float("nan"), float("nan")
    result = scipy_wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


def bootstrap_interval(d: np.ndarray, groups: np.ndarray, level: float = 0.95, n_boot: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the Hodges-Lehmann estimate, resampling whole groups (tasks)."""
    d, groups = np.asarray(d, dtype=np.float64), np.asarray(groups)
    names = np.unique(groups)
    members = [d[groups == g] for g in names]
    rng = np.random.default_rng(seed)
    estimates = np.empty(n_boot)
    for b in range(n_boot):  # each resample is a few hundred pairs at most: the Walsh averages are cheap
        estimates[b] = hodges_lehmann(np.concatenate([members[i] for i in rng.integers(0, len(names), len(names))]))
    tail = (1 - level) / 2
    return float(np.quantile(estimates, tail)), float(np.quantile(estimates, 1 - tail))


def rate_differences(count_x: np.ndarray, n_x: np.ndarray, count_y: np.ndarray, n_y: np.ndarray) -> np.ndarray:
    """count_x / n_x - count_y / n_y computed exactly (as rationals), then rounded once: equal differences of
    rates over discrete outcomes are equal floats, so the signed-rank test sees their ties (float rates
    subtracted differ in the last digits and break ties at random). NaN where a rate is undefined."""
    from fractions import Fraction

    out = np.full(len(count_x), np.nan)
    for i, (a, m, b, n) in enumerate(zip(count_x, n_x, count_y, n_y)):
        if all(np.isfinite([a, m, b, n])) and m > 0 and n > 0:
            out[i] = float(Fraction(int(a), int(m)) - Fraction(int(b), int(n)))
    return out


def paired_test(x: np.ndarray, y: np.ndarray, groups: np.ndarray, level: float = 0.95, seed: int = 0,
                d: np.ndarray | None = None) -> dict:
    """Every statistic above for x against y (paired entries, `groups` naming each pair's task); `d`, where
    given, the exact differences (`rate_differences`) the tests rank in place of x - y."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    d = x - y if d is None else np.asarray(d, dtype=np.float64)
    keep = np.isfinite(d)
    d, groups = d[keep], np.asarray(groups)[keep]
    statistic, p = wilcoxon(d)
    low, high = bootstrap_interval(d, groups, level, seed=seed) if len(d) else (float("nan"), float("nan"))
    return {"n": int(len(d)), "n_tasks": int(len(np.unique(groups))), "wilcoxon_statistic": statistic,
            "p_value": p, "hodges_lehmann": hodges_lehmann(d), "ci_low": low, "ci_high": high,
            "rank_biserial": rank_biserial(d), "mean_difference": float(d.mean()) if len(d) else float("nan")}
