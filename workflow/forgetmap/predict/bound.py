"""A bound on a mean over every example from a forecast of each and the measured values of a random few
(prediction-powered inference): the forgetting monitor's bound on the mean forgetting of the weights at a check
(`mean_bound`, `share_bound`), and on a benchmark's accuracy, F and BT from k scored items (`crossfit_bound`,
`binomial_interval`: forgetmap.correctness.forecast).

The forecast row (the map's completion of the k probes' values) is a prediction of every usable example's
forgetting; the audit examples, drawn at random from the examples that are not probes when the map was made
(seeded and recorded; by two strata of the fit rows, forgetmap.predict.audit, each then weighted by its size:
`corrected_mean`), are measured at each check too. Their forecasts never saw their values, so
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

    half-width = t_{m−1, (1+level)/2} · (N − k)/N · sd(corrected) / √m · √(1 − m / (N − k)),

computed for one audit and for the thousands the monitor's ends are calibrated on by one core (`stratified_t`).
Per-example forgetting has a long upper tail (kurtosis 40-60 on the demo's later checks), which a sample of 30 or
60 mostly misses, so t's interval misses the mean from below more often than the level allows (0.876 at 0.9 on the
demo, 30 examples). The monitor and the workflow give `ends` instead (forgetmap.predict.ends): t's half-width
scaled to where the map's fit tasks place the truth, known before the run; on that demo they covered 0.898 at a
mean half-width of 0.037 nats per token. Hall's (1992) transformation of t at the map's residual skewness, which
covered as well at 0.060 because its upper end grows without bound with the skewness, was retired for them; the
benchmarks that compare against it keep it (benchmarks/hall.py, BENCHMARKS.md).

It promises, over the draw of the audit examples (not over tasks or runs), that the interval covers the mean
forgetting of the weights at that check with probability about `level`: an approximation to the corrected
values' mean, which a heavy tail strains at small m (BENCHMARKS.md measures the coverage). The audit's own
t-interval (`sample_interval`) is the valid bound a random sample gives without a map.

A share of examples forgotten by more than x nats (`share_bound`, what a user may mean by a budget) is the mean
of indicators, bounded the same way, except for the spread: a rare share's audit often holds no example where the
measured and the forecast indicators disagree, and its plain t-interval is then of width 0 (it covered 0.59 at
level 0.9 for the demo's share above 0.5 nats). In the manner of Agresti & Min's interval for paired proportions
(2005), the spread is the corrected values' with half a pseudo-example of each of the four (measured, forecast)
pairs added (`paired_spread`); the estimate is left as it is. On the demo it covered 0.92 and 0.97 for the
shares above 0.2 and 0.5 nats with 60 audit examples, 0.95 and 0.99 with 30 (BENCHMARKS.md).

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
               audit_values: np.ndarray, level: float, weight: float | str = 1.0,
               indicators: bool = False, strata: np.ndarray | None = None,
               ends: tuple[float, float] | None = None) -> MeanBound:
    """The mean of z over every usable example at a check, bounded at `level`: `forecast` the completed row (N,),
    `known` the probes' positions and `probe_values` their measured z, `audit` the audit examples' positions (none
    of them probes) and `audit_values` their measured z. `weight`: the forecast's (1: the plain prediction-powered
    estimate; 0: the audit's own mean; "tuned": tuned on the audit, `tuned_weights`); `indicators`: 0/1 values
    (`share_bound`); `strata`: each usable example's stratum (0, 1, ...; forgetmap.predict.audit) where
    the audit was drawn by strata, None where uniformly; `ends`: (up, down), the interval [estimate - down · h,
    estimate + up · h] with h t's half-width, as the map's fit tasks place the truth (forgetmap.predict.ends; the
    monitor's; None: t's)."""
    forecast = np.asarray(forecast, dtype=np.float64)
    return corrected_mean(forecast, known, probe_values, audit_values, forecast[audit], level, weight=weight,
                          indicators=indicators, ends=ends,
                          strata=None if strata is None else (np.asarray(strata), np.asarray(strata)[audit]))


def crossfit_bound(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, held_out: np.ndarray,
                   level: float, weight: float | str = 1.0) -> MeanBound:
    """The same bound where the measured examples are both the forecast's input and its audit: `known` drawn at
    random, `values` measured there, `held_out` each one's forecast from the others alone (cross-fitted: the
    forecast that did not see its value), so its residual is an honest error of a forecast from k - 1 examples.
    The sample is drawn from all N and corrects the N - k others it is not part of: the error of their mean
    against the others' is sd · √(N / (k (N - k))), so the half-width on the mean over N is
    t · sd / √k · √((N - k) / N) (wider than an audit drawn from the others themselves)."""
    return corrected_mean(forecast, known, values, values, held_out, level, disjoint=True, weight=weight)


def tuned_weights(measured: np.ndarray, predicted: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """Each sampled example's weight on the forecast, fitted on the other m - 1 alone (leave-one-out cross-fitting,
    so an example's own error never chooses its weight): the least-squares slope of the measured values on the
    forecast ones, the weight that makes the corrected sample's variance least (PPI++'s power tuning), at least 0
    (a forecast that runs against the values is left out rather than turned). `groups`: each example's stratum,
    where the sample was drawn by strata: the slope within them, pooled. Where the others' forecasts do not vary,
    0."""
    z, f = np.asarray(measured, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    m = len(z)
    if m < 3:
        return np.zeros(m)
    groups = np.zeros(m, dtype=np.int64) if groups is None else np.unique(groups, return_inverse=True)[1]
    centre = f.mean()  # sums about one centre (exact in float64 here)
    fc, zc = f - centre, z - z.mean()
    count = np.bincount(groups).astype(np.float64)

    def within(sf, sz, sff, sfz, n):  # the centred sums of a group of n from its raw ones (0 for an empty group)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.where(n > 0, sff - sf * sf / n, 0.0), np.where(n > 0, sfz - sf * sz / n, 0.0))

    sums = [np.bincount(groups, weights=w) for w in (fc, zc, fc * fc, fc * zc)]
    whole = within(*sums, count)
    mine = [s[groups] for s in sums]
    left = within(mine[0] - fc, mine[1] - zc, mine[2] - fc * fc, mine[3] - fc * zc, count[groups] - 1)
    varf = whole[0].sum() - whole[0][groups] + left[0]
    cov = whole[1].sum() - whole[1][groups] + left[1]
    scale = max(float(np.max(np.abs(fc))), 1e-300) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(varf > 1e-12 * scale * (m - 1), cov / varf, 0.0)
    return np.maximum(slope, 0.0)


def paired_spread(measured: np.ndarray, predicted: np.ndarray, lam: np.ndarray, centre: float) -> float:
    """The standard deviation of the corrected values z - λ (ẑ - centre) of 0/1 indicators, with half a
    pseudo-example of each of the four (measured, forecast) pairs added to the m sampled (Agresti & Min's adjustment
    for paired proportions): never 0 where the sample holds no disagreement, as a rare share's often does."""
    lam_mean = float(np.mean(lam))
    pairs = np.array([(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)])
    values = np.concatenate([measured - lam * (predicted - centre), pairs[:, 0] - lam_mean * (pairs[:, 1] - centre)])
    weights = np.concatenate([np.ones(len(measured)), np.full(4, 0.5)])
    mean = float(np.sum(weights * values) / weights.sum())
    return float(np.sqrt(np.sum(weights * (values - mean) ** 2) / (weights.sum() - 1)))


def corrected_mean(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, sampled: np.ndarray,
                   sampled_forecast: np.ndarray, level: float, disjoint: bool = False,
                   weight: float | str = 1.0, indicators: bool = False,
                   strata: tuple[np.ndarray, np.ndarray] | None = None,
                   ends: tuple[float, float] | None = None) -> MeanBound:
    """The examples at `known` counted as measured (`values`), the N - k others' mean estimated from examples drawn
    at random (`sampled` measured there, `sampled_forecast` the forecast of each that did not see it) as

        others' mean = λ · mean of the others' forecast + mean of (sampled - λ · sampled_forecast)

    with Student's t on the m corrected values: drawn from the N - k others themselves (an audit), with the finite
    population's correction (`stratified_t`); `disjoint`, drawn from all N as the measured examples are
    (crossfit_bound). Any λ keeps the estimate unbiased; λ = 1 (`weight`'s default) is the plain prediction-powered
    estimate, λ = 0 the sample's own mean, and `weight` "tuned" tunes it per example on the rest of the sample
    (`tuned_weights`), so that a forecast that does not help costs next to nothing and one that does narrows the
    interval by √(1 - ρ²), ρ the correlation of forecast and value over the sample. `indicators`: the values are 0/1
    (a share), and the spread is `paired_spread`'s.

    `strata`: (each of the N examples' stratum, each sampled one's), for an audit drawn by strata
    (forgetmap.predict.audit): the others' mean is then the strata's, each weighted by its share W_h of the others,
    each corrected about its own forecast mean (`stratified_t`). One stratum is the plain audit, the same interval.
    A stratum with fewer than two sampled values gives no bound (NaN).

    `ends`: (up, down) in t's half-widths (forgetmap.predict.ends): the interval [estimate - down · h,
    estimate + up · h], h t's half-width."""
    n, k = len(forecast), len(known)
    if k >= n:  # every example measured: the mean itself
        mean = float(np.mean(values))
        return MeanBound(mean, mean, mean, 0.0)
    audit = corrected_strata(forecast, known, sampled, sampled_forecast, weight, indicators, strata)
    if audit is None:
        return MeanBound(float("nan"), float("nan"), float("nan"), float("nan"))
    known_sum = float(np.sum(values))
    if disjoint:  # (one stratum: crossfit_bound)
        corrected, spread, m = audit.parts[0], audit.spreads[0], len(audit.parts[0])
        estimate = (known_sum + (n - k) * float(corrected.mean())) / n
        half = _t(level, m - 1) * spread / np.sqrt(m) * np.sqrt((n - k) / n)
        return MeanBound(estimate, estimate - half, estimate + half, audit.weight)
    estimate, scale, df = (float(v[0]) for v in stratified_t(
        known_sum, n, k, [part[None, :] for part in audit.parts], audit.size,
        audit.spreads[None, :] if indicators else None))
    q = _t(level, df)
    up, down = (q, q) if ends is None else (ends[0] * q, ends[1] * q)
    return MeanBound(estimate, estimate - down * scale, estimate + up * scale, audit.weight)


@dataclass(frozen=True)
class CorrectedStrata:
    """An audit's corrected values z - λ (ẑ - the stratum's forecast mean), by stratum (`corrected_strata`)."""
    parts: list           # each stratum's corrected values, in the strata's order
    spreads: np.ndarray   # each one's standard deviation (`paired_spread`'s for indicators)
    size: np.ndarray      # each stratum's number of examples that are not probes (float)
    weight: float         # the forecast's weight λ, its mean over the sample


def corrected_strata(forecast: np.ndarray, known: np.ndarray, sampled: np.ndarray, sampled_forecast: np.ndarray,
                     weight: float | str = 1.0, indicators: bool = False,
                     strata: tuple[np.ndarray, np.ndarray] | None = None) -> CorrectedStrata | None:
    """`corrected_mean`'s corrected values by stratum, the sampled examples with a value and a forecast only; None
    where a stratum has fewer than two of them."""
    forecast = np.asarray(forecast, dtype=np.float64)
    n = len(forecast)
    z, f = np.asarray(sampled, dtype=np.float64), np.asarray(sampled_forecast, dtype=np.float64)
    keep = np.isfinite(z) & np.isfinite(f)
    labels, sampled_labels = (np.zeros(n, dtype=np.int64), np.zeros(len(z), dtype=np.int64)) if strata is None \
        else (np.asarray(strata[0]), np.asarray(strata[1]))
    z, f, sampled_labels = z[keep], f[keep], sampled_labels[keep]
    others = np.ones(n, dtype=bool)
    others[known] = False
    groups, size = _strata_sizes(labels, others)
    parts = [np.flatnonzero(sampled_labels == h) for h in groups]
    if not len(groups) or len(z) < 2 or min(len(p) for p in parts) < 2:
        return None
    if weight == "tuned":
        lam = tuned_weights(z, f, sampled_labels if len(groups) > 1 else None)
    elif isinstance(weight, str):
        raise ValueError(f"weight {weight!r}: a number, or 'tuned'")
    else:
        lam = np.full(len(z), float(weight))
    centres = np.array([forecast[others & (labels == h)].mean() for h in groups])
    corrected = z - lam * (f - centres[np.searchsorted(groups, sampled_labels)])
    spreads = np.array([paired_spread(z[p], f[p], lam[p], centres[h]) if indicators else corrected[p].std(ddof=1)
                        for h, p in enumerate(parts)])
    return CorrectedStrata([corrected[p] for p in parts], spreads, size, float(lam.mean()))


def stratified_t(known_sum: float, n: int, k: int, corrected: list, size: np.ndarray,
                 spreads: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stratified estimate of the mean over n examples, k of them measured (their values summing to
    `known_sum`), for many audits at once: `corrected` each stratum's corrected values, (draws, m_h) (NaN where an
    example has none: left out of that draw), `size` each stratum's number of the n - k others, `spreads` (draws,
    H) in place of each stratum's standard deviation (a share's, `paired_spread`). Returns (estimate, scale, df),
    each (draws,): the estimate (Σ known + (n - k) Σ_h W_h mean_h) / n with W_h = size_h / (n - k), its standard
    error scale = (n - k) / n · √(Σ_h W_h² s_h² / m_h · (1 - m_h / N_h)) (each stratum's finite population), and
    Welch and Satterthwaite's degrees of freedom (m - 1 for one stratum or no spread): the interval at a level is
    estimate ± t_{df} · scale. NaN in a draw where a stratum has fewer than two values. The one bound of a check
    (`corrected_mean`) and the ends' thousands of calibration audits (forgetmap.predict.ends) both come from here."""
    size = np.asarray(size, dtype=np.float64)
    share = size / size.sum()
    counts = np.stack([np.sum(np.isfinite(c), axis=1) for c in corrected], axis=1).astype(np.float64)
    sums = np.stack([np.nansum(c, axis=1) for c in corrected], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        means = sums / counts
        if spreads is None:
            spreads = np.sqrt(np.stack([np.nansum((c - means[:, [h]]) ** 2, axis=1)
                                        for h, c in enumerate(corrected)], axis=1) / (counts - 1))
        terms = share ** 2 * np.asarray(spreads, dtype=np.float64) ** 2 / counts
        kept = terms * np.maximum(0.0, 1 - counts / np.maximum(size, 1))
        variance = kept.sum(axis=1)
        m = counts.sum(axis=1)
        df = variance ** 2 / np.sum(kept ** 2 / (counts - 1), axis=1) if len(corrected) > 1 else m - 1
        df = np.where(variance > 0, df, m - 1)
    enough = (counts >= 2).all(axis=1)
    estimate = np.where(enough, (known_sum + (n - k) * (means @ share)) / n, np.nan)
    scale = np.where(enough, (n - k) / n * np.sqrt(variance), np.nan)
    return estimate, scale, np.where(enough, df, np.nan)


def share_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
                audit_values: np.ndarray, over: float, level: float, weight: float | str = 1.0,
                strata: np.ndarray | None = None) -> MeanBound:
    """The share of usable examples forgotten by more than `over` nats per token at a check, bounded at `level`:
    `mean_bound` on the indicators (the forecast's, the probes' and the audit examples' measured ones), its spread
    `paired_spread`'s in each stratum (`strata`, as `mean_bound`'s)."""
    def above(z):
        z = np.asarray(z, dtype=np.float64)
        return np.where(np.isfinite(z), (z > over).astype(np.float64), np.nan)

    bound = mean_bound(above(forecast), known, above(probe_values), audit, above(audit_values), level, weight,
                       indicators=True, strata=strata)
    return MeanBound(bound.estimate, max(0.0, bound.lower), min(1.0, bound.upper), bound.weight)


def audit_mean(n: int, known: np.ndarray, audit: np.ndarray, audited: np.ndarray,
               strata: np.ndarray | None = None) -> float:
    """The audit examples' own estimate of the mean over the n - k examples that are not probes, no forecast: each
    stratum's mean weighted by its share of them (`strata`, as `mean_bound`'s; the plain mean where the audit was
    drawn uniformly). NaN where a stratum's audit examples have no value."""
    audited = np.asarray(audited, dtype=np.float64)
    labels = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata)
    others = np.ones(n, dtype=bool)
    others[np.asarray(known)] = False
    groups, size = _strata_sizes(labels, others)
    found = [audited[(labels[audit] == h) & np.isfinite(audited)] for h in groups]
    if min(len(values) for values in found) == 0:
        return float("nan")
    return float(sum(w * values.mean() for w, values in zip(size / size.sum(), found)))


def _strata_sizes(labels: np.ndarray, others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the strata among the examples that are not probes, each one's number of them, float)."""
    groups = np.unique(labels[others])
    return groups, np.array([np.sum(others & (labels == h)) for h in groups], dtype=np.float64)


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
