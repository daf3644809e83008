"""A bound on a mean over every example from a forecast of each and the measured values of a random few
(prediction-powered inference): the forgetting monitor's bound on the mean forgetting of the weights at a check
(`mean_bound`, `share_bound`), and on a benchmark's accuracy, F and BT from k scored items (`crossfit_bound`,
`binomial_interval`: forgetmap.correctness.forecast).

The forecast row (the map's completion of the k probes' values) is a prediction of every usable example's
forgetting; the audit examples, drawn uniformly at random from the examples that are not probes when the map
was made (seeded and recorded), are measured at each check too. Their forecasts never saw their values, so
they correct the forecast honestly: prediction-powered inference (Angelopoulos et al., Science 2023) with the
probes counted exactly and the forecast weighted by λ (PPI++, Angelopoulos, Duchi & Zrnic 2023):

    estimate = (Σ_probes z + (N − k) · mean_audit(z − λ (ẑ − mean_others ẑ))) / N

over the N usable examples. λ = 1, the default, is the plain estimate (the forecast's mean corrected by the
audit's mean residual), λ = 0 the audit's own mean. With `weight="tuned"` each audit example's λ is the slope of
measured on forecast over the other m − 1 (`tuned_weights`, leave-one-out: an example's own error never chooses
its weight), which makes the corrected values' variance least: the interval about the audit sample's own where
the forecast does not help (a forecast scaled wrong, or wrong, costs next to nothing) and narrower by √(1 − ρ²)
where it does. On the demo's heavy-tailed forgetting its intervals covered less than the plain ones (0.80
against 0.88 at 0.9, BENCHMARKS.md): a sample of 30 rarely holds the tail, and the tuned λ follows the sample;
so it is not the default. The interval at `level` is Student's t on the m corrected values, with the finite
population's correction (the audit is drawn without replacement from the N − k others):

    half-width = t_{m−1, (1+level)/2} · (N − k)/N · sd(corrected) / √m · √(1 − m / (N − k)).

It promises, over the draw of the audit examples (not over tasks or runs), that the interval covers the mean
forgetting of the weights at that check with probability about `level`: t's approximation to the corrected
values' mean, which per-example forgetting's heavy tail strains at small m (BENCHMARKS.md measures the coverage).
The audit's own t-interval (`sample_interval`) is the valid bound a random sample gives without a map.

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
    weight: float = float("nan")  # the forecast's weight in the estimate (mean over the sample), NaN where none

    @property
    def halfwidth(self) -> float:
        return (self.upper - self.lower) / 2


def _t(level: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf((1 + level) / 2, df))


def mean_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
               audit_values: np.ndarray, level: float, weight: float | str = 1.0) -> MeanBound:
    """The mean of z over every usable example at a check, bounded at `level`: `forecast` the completed row (N,),
    `known` the probes' positions and `probe_values` their measured z, `audit` the audit examples' positions (none
    of them probes) and `audit_values` their measured z. `weight`: the forecast's (1: the plain prediction-powered
    estimate; 0: the audit's own mean; "tuned": tuned on the audit, `tuned_weights`)."""
    forecast = np.asarray(forecast, dtype=np.float64)
    return corrected_mean(forecast, known, probe_values, audit_values, forecast[audit], level, weight=weight)


def crossfit_bound(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, held_out: np.ndarray,
                   level: float, weight: float | str = 1.0) -> MeanBound:
    """The same bound where the measured examples are both the forecast's input and its audit: `known` drawn at
    random, `values` measured there, `held_out` each one's forecast from the others alone (cross-fitted: the
    forecast that did not see its value), so its residual is an honest error of a forecast from k - 1 examples.
    The sample is drawn from all N and corrects the N - k others it is not part of: the error of their mean
    against the others' is sd · √(N / (k (N - k))), so the half-width on the mean over N is
    t · sd / √k · √((N - k) / N) (wider than an audit drawn from the others themselves)."""
    return corrected_mean(forecast, known, values, values, held_out, level, disjoint=True, weight=weight)


def tuned_weights(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Each sampled example's weight on the forecast, fitted on the other m - 1 alone (leave-one-out cross-fitting,
    so an example's own error never chooses its weight): the least-squares slope of the measured values on the
    forecast ones, the weight that makes the corrected sample's variance least (PPI++'s power tuning), at least 0
    (a forecast that runs against the values is left out rather than turned). Where the others' forecasts do not
    vary, 0."""
    z, f = np.asarray(measured, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    m = len(z)
    if m < 3:
        return np.zeros(m)
    centre = f.mean()  # sums of the others, from the whole sample's, about one centre (exact in float64 here)
    fc, zc = f - centre, z - z.mean()
    sf, sz, sff, sfz = fc.sum() - fc, zc.sum() - zc, (fc * fc).sum() - fc * fc, (fc * zc).sum() - fc * zc
    n = m - 1
    varf = sff - sf * sf / n
    cov = sfz - sf * sz / n
    scale = max(float(np.max(np.abs(fc))), 1e-300) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(varf > 1e-12 * scale * n, cov / varf, 0.0)
    return np.maximum(slope, 0.0)


def corrected_mean(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, sampled: np.ndarray,
                   sampled_forecast: np.ndarray, level: float, disjoint: bool = False,
                   weight: float | str = 1.0) -> MeanBound:
    """The examples at `known` counted as measured (`values`), the N - k others' mean estimated from examples drawn
    at random (`sampled` measured there, `sampled_forecast` the forecast of each that did not see it) as

        others' mean = λ · mean of the others' forecast + mean of (sampled - λ · sampled_forecast)

    with Student's t on the m corrected values: drawn from the N - k others themselves (an audit), with the finite
    population's correction; `disjoint`, drawn from all N as the measured examples are (crossfit_bound). Any λ
    keeps the estimate unbiased; λ = 1 (`weight`'s default) is the plain prediction-powered estimate, λ = 0 the
    sample's own mean, and `weight` "tuned" tunes it per example on the rest of the sample (`tuned_weights`), so
    that a forecast that does not help costs next to nothing and one that does narrows the interval by √(1 - ρ²),
    ρ the correlation of forecast and value over the sample."""
    forecast = np.asarray(forecast, dtype=np.float64)
    n, k = len(forecast), len(known)
    z, f = np.asarray(sampled, dtype=np.float64), np.asarray(sampled_forecast, dtype=np.float64)
    keep = np.isfinite(z) & np.isfinite(f)
    z, f = z[keep], f[keep]
    m = len(z)
    if k >= n:  # every example measured: the mean itself
        mean = float(np.mean(values))
        return MeanBound(mean, mean, mean, 0.0)
    if m < 2:
        return MeanBound(float("nan"), float("nan"), float("nan"), float("nan"))
    others = np.ones(n, dtype=bool)
    others[known] = False
    centre = float(forecast[others].mean())
    if weight == "tuned":
        lam = tuned_weights(z, f)
    elif isinstance(weight, str):
        raise ValueError(f"weight {weight!r}: a number, or 'tuned'")
    else:
        lam = np.full(m, float(weight))
    corrected = z - lam * (f - centre)
    estimate = (float(np.sum(values)) + (n - k) * float(corrected.mean())) / n
    spread = float(corrected.std(ddof=1)) / np.sqrt(m)
    if disjoint:
        half = _t(level, m - 1) * spread * np.sqrt((n - k) / n)
    else:
        half = _t(level, m - 1) * (n - k) / n * spread * np.sqrt(max(0.0, 1 - m / max(n - k, 1)))
    return MeanBound(estimate, estimate - half, estimate + half, float(lam.mean()))


def share_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
                audit_values: np.ndarray, over: float, level: float, weight: float | str = 1.0) -> MeanBound:
    """The share of usable examples forgotten by more than `over` nats per token at a check, bounded at `level`:
    `mean_bound` on the indicators (the forecast's, the probes' and the audit examples' measured ones)."""
    def above(z):
        z = np.asarray(z, dtype=np.float64)
        return np.where(np.isfinite(z), (z > over).astype(np.float64), np.nan)

    bound = mean_bound(above(forecast), known, above(probe_values), audit, above(audit_values), level, weight)
    return MeanBound(bound.estimate, max(0.0, bound.lower), min(1.0, bound.upper), bound.weight)


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
