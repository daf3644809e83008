"""Hall's (1992) transformation of Student's t, the forgetting monitor's bound before the map's studentized ends
(forgetmap.predict.ends) replaced it, kept for the benchmarks that still compare against it (monitor_bound.py,
monitor_headline.py, bound_variants.py; their figures in BENCHMARKS.md).

The studentised mean of values with skewness γ is g(t) = t + γ t² / (3√m) + γ² t³ / (27 m) + γ / (6√m), monotone in
t; inverted at t's quantiles ±q, it reaches further up than t's interval and less far down for γ > 0, as a long upper
tail that a small sample underrepresents needs. The skewness is the map's: the median over the fit tasks'
leave-one-task-out folds of their residuals' skewness (one per audit stratum where the audit was drawn by strata),
known before any run. Its upper end grows without bound with the skewness (1.4-2.3x the narrowest an audit alone
gives on one machine's demo map), which is why it was retired.
"""

from __future__ import annotations

import numpy as np

from forgetmap.predict.bound import MeanBound, corrected_strata, stratified_t


def hall_quantiles(level: float, m: int, skew: float | None) -> tuple[float, float]:
    """(a, b): the interval at `level` on a mean of m values is [mean − b · se, mean + a · se]; Student's t's
    quantile on both sides where `skew` is None, NaN or 0."""
    if skew is None or not np.isfinite(skew):
        return hall_ends(level, m - 1, None)
    return hall_ends(level, m - 1, skew / np.sqrt(m))


def hall_ends(level: float, df: float, lean: float | None) -> tuple[float, float]:
    """`hall_quantiles` for an estimate whose own skewness is `lean` (γ / √m for a mean of m values; a stratified
    mean's from its strata's, `hall_bound`), with Student's t at `df` degrees of freedom."""
    from scipy.stats import t

    q = float(t.ppf((1 + level) / 2, df))
    if lean is None or not np.isfinite(lean) or abs(lean) < 1e-12:
        return q, q

    def inverse(x: float) -> float:
        return 3 / lean * (np.cbrt(1 + lean * (x - lean / 6)) - 1)

    return float(-inverse(-q)), float(inverse(q))


def hall_bound(forecast: np.ndarray, known: np.ndarray, probe_values: np.ndarray, audit: np.ndarray,
               audit_values: np.ndarray, level: float, skew, weight: float | str = 1.0,
               strata: np.ndarray | None = None) -> MeanBound:
    """forgetmap.predict.bound.mean_bound's estimate and standard error with Hall's ends at the corrected values'
    skewness `skew` (one for all, or one per stratum where the audit was drawn by `strata`): the estimate's own
    skewness Σ W_h³ γ_h s_h³ / m_h² over its standard error cubed. `skew` None: t's interval."""
    forecast = np.asarray(forecast, dtype=np.float64)
    n, k = len(forecast), len(known)
    labels = None if strata is None else (np.asarray(strata), np.asarray(strata)[audit])
    parts = corrected_strata(forecast, known, audit_values, forecast[audit], weight, strata=labels)
    if parts is None:
        return MeanBound(float("nan"), float("nan"), float("nan"), float("nan"))
    estimate, scale, df = (float(v[0]) for v in stratified_t(float(np.sum(probe_values)), n, k,
                                                            [p[None, :] for p in parts.parts], parts.size))
    lean = None
    if skew is not None:
        share = parts.size / parts.size.sum()
        counts = np.array([len(p) for p in parts.parts], dtype=np.float64)
        terms = share ** 2 * parts.spreads ** 2 / counts
        gamma = np.broadcast_to(np.asarray(skew, dtype=np.float64), (len(counts),))
        if np.isfinite(gamma).all() and terms.sum() > 0:
            lean = float(np.sum(share ** 3 * gamma * parts.spreads ** 3 / counts ** 2) / terms.sum() ** 1.5)
    up, down = hall_ends(level, df, lean)
    return MeanBound(estimate, estimate - down * scale, estimate + up * scale, parts.weight)


def fold_skewness(train: np.ndarray, known: np.ndarray, model, method: str, params: dict,
                  strata: np.ndarray | None = None):
    """The median over the leave-one-task-out folds (forgetmap.predict.conformal.fold_predictions) of the skewness
    of each left-out row's residuals z − ẑ over its hidden entries: one float, or with `strata` (each example's
    stratum, -1 at the probes) one per stratum, a list. None with fewer than 3 fit tasks."""
    from scipy.stats import skew

    from forgetmap.predict.conformal import fold_predictions

    train = np.asarray(train)
    if len(train) < 3:
        return None
    hidden = np.ones(train.shape[1], dtype=bool)
    hidden[known] = False
    parts = [hidden] if strata is None else [hidden & (strata == h) for h in range(int(strata.max()) + 1)]
    found = np.array([[float(skew((train[row] - pred).astype(np.float64)[part])) for part in parts]
                      for row, pred in fold_predictions(train, known, model, method, params)])
    each = [float(np.median(column[np.isfinite(column)])) if np.isfinite(column).any() else None for column in found.T]
    if any(v is None for v in each):
        return None
    return each[0] if strata is None else each


def map_skew(forecast_map, strata: bool = True):
    """A forecast map's residual skewness as the monitor once took it: one per audit stratum where its audit was
    drawn by strata (`strata`), else one for all."""
    labels = forecast_map.strata if strata else None
    return fold_skewness(forecast_map.train, forecast_map.known, forecast_map.completion()[0], forecast_map.method,
                         forecast_map.params, labels)
