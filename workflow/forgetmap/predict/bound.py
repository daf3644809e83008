"""A bound on a mean over every example from a forecast of each and the measured values of a random few
(prediction-powered inference): the forgetting monitor's bound on the mean forgetting of the weights at a check
(`mean_bound`, `share_bound`), and on a benchmark's accuracy, F and BT from k scored items (`crossfit_bound`,
`binomial_interval`: forgetmap.correctness.forecast).

The forecast row (the map's completion of the k probes' values) is a prediction of every usable example's
forgetting; the audit examples, drawn uniformly at random from the examples that are not probes when the map
was made (seeded and recorded), are measured at each check too. Their residuals (measured − forecast) come from
a forecast that never saw their values, so they are honest errors of it, and their mean corrects the
forecast's mean: prediction-powered inference (Angelopoulos et al., Science 2023) with the probes counted
exactly,

    estimate = (Σ_probes z + Σ_others ẑ + (N − k) · mean(residual_audit)) / N

over the N usable examples. Its interval at `level` is Student's t on the m audit residuals, with the finite
population's correction (the audit is drawn without replacement from the N − k others):

    half-width = t_{m−1, (1+level)/2} · (N − k)/N · sd(residual) / √m · √(1 − m / (N − k)).

It promises, over the draw of the audit examples (not over tasks or runs), that the interval covers the mean
forgetting of the weights at that check with probability about `level`: t's approximation to the residuals'
mean, which per-example forgetting's heavy tail strains at small m (BENCHMARKS.md measures the coverage). The
narrower the forecast's errors, the narrower the interval: where the forecast is good the audit's residuals
vary far less than the audit's own values, whose t-interval (`sample_interval`) is the valid bound a random
sample gives without a map.

A share of examples forgotten by more than x nats (`share_bound`, what a user may mean by a budget) is the mean
of indicators, bounded the same way (t on indicator residuals: rough where the share is near 0 or 1).

Where fewer than two audit examples have a value, there is no bound (NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeanBound:
    estimate: float
    lower: float
    upper: float

    @property
    def halfwidth(self) -> float:
        return (self.upper - self.lower) / 2


def _t(level: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf((1 + level) / 2, df))


def mean_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
               audit_values: np.ndarray, level: float) -> MeanBound:
    """The mean of z over every usable example at a check, bounded at `level`: `forecast` the completed row (N,),
    `known` the probes' positions and `probe_values` their measured z, `audit` the audit examples' positions (none
    of them probes) and `audit_values` their measured z."""
    forecast = np.asarray(forecast, dtype=np.float64)
    return corrected_mean(forecast, known, probe_values, np.asarray(audit_values, dtype=np.float64) - forecast[audit],
                          level)


def crossfit_bound(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, held_out: np.ndarray,
                   level: float) -> MeanBound:
    """The same bound where the measured examples are both the forecast's input and its audit: `known` drawn at
    random, `values` measured there, `held_out` each one's forecast from the others alone (cross-fitted: the
    forecast that did not see its value), so its residual is an honest error of a forecast from k - 1 examples.
    The residuals' sample is drawn from all N and corrects the N - k others it is not part of: the error of their
    mean against the others' is sd · √(N / (k (N - k))), so the half-width on the mean over N is
    t · sd / √k · √((N - k) / N) (wider than an audit drawn from the others themselves)."""
    return corrected_mean(forecast, known, values, np.asarray(values, dtype=np.float64) - held_out, level,
                          disjoint=True)


def corrected_mean(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, residuals: np.ndarray,
                   level: float, disjoint: bool = False) -> MeanBound:
    """The examples at `known` counted as measured, the rest as forecast, corrected by the mean of `residuals`
    (measured - forecast at examples drawn at random), with Student's t on them: drawn from the N - k others
    themselves (an audit), with the finite population's correction; `disjoint`, drawn from all N as the measured
    examples are (crossfit_bound)."""
    forecast = np.asarray(forecast, dtype=np.float64)
    n, k = len(forecast), len(known)
    residuals = np.asarray(residuals, dtype=np.float64)
    residuals = residuals[np.isfinite(residuals)]
    m = len(residuals)
    if m < 2:
        return MeanBound(float("nan"), float("nan"), float("nan"))
    others = np.ones(n, dtype=bool)
    others[known] = False
    estimate = (float(np.sum(values)) + float(forecast[others].sum()) + (n - k) * float(residuals.mean())) / n
    spread = float(residuals.std(ddof=1)) / np.sqrt(m)
    if disjoint:
        half = _t(level, m - 1) * spread * np.sqrt((n - k) / n)
    else:
        half = _t(level, m - 1) * (n - k) / n * spread * np.sqrt(max(0.0, 1 - m / max(n - k, 1)))
    return MeanBound(estimate, estimate - half, estimate + half)


def share_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
                audit_values: np.ndarray, over: float, level: float) -> MeanBound:
    """The share of usable examples forgotten by more than `over` nats per token at a check, bounded at `level`:
    `mean_bound` on the indicators (the forecast's, the probes' and the audit examples' measured ones)."""
    def above(z):
        z = np.asarray(z, dtype=np.float64)
        return np.where(np.isfinite(z), (z > over).astype(np.float64), np.nan)

    bound = mean_bound(above(forecast), known, above(probe_values), audit, above(audit_values), level)
    return MeanBound(bound.estimate, max(0.0, bound.lower), min(1.0, bound.upper))


def sample_interval(values: np.ndarray, level: float) -> MeanBound:
    """The t-interval of a sample's mean (no forecast): what a random sample alone bounds, and what the naive
    monitor's probes give when read as one."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return MeanBound(float("nan"), float("nan"), float("nan"))
    mean = float(values.mean())
    half = _t(level, len(values) - 1) * float(values.std(ddof=1)) / np.sqrt(len(values))
    return MeanBound(mean, mean - half, mean + half)


def binomial_interval(successes: int, n: int, level: float) -> MeanBound:
    """A share's exact (Clopper-Pearson) interval from `successes` of `n` draws: what k items drawn at random
    give by themselves (the naive monitor of a benchmark)."""
    from scipy.stats import beta

    if n == 0:
        return MeanBound(float("nan"), float("nan"), float("nan"))
    tail = (1 - level) / 2
    lower = 0.0 if successes == 0 else float(beta.ppf(tail, successes, n - successes + 1))
    upper = 1.0 if successes == n else float(beta.ppf(1 - tail, successes + 1, n - successes))
    return MeanBound(successes / n, lower, upper)
