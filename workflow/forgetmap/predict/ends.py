"""The bound's ends as the map's own fit tasks place the truth: how far, in the t-interval's half-widths, the
forgetting monitor's estimate of a check's mean falls from the mean itself (forgetmap.predict.bound's `ends`).

Each fit task is left out in turn (forgetmap.predict.conformal's folds), its row completed from its probes' values
as a check's is, and audits of the map's size drawn from its other examples as the map's audit was drawn (as many
from each stratum, uniformly within it; seeds apart from the map's own), each bounded as a check is bounded
(forgetmap.predict.bound.mean_bound, Student's t). The ratio r = (estimate − the row's mean) / the t half-width
over every fold and draw places the truth: the interval [estimate − down · h, estimate + up · h], with down and up
the level's upper and (negated) lower central quantiles of r, held the fit tasks' means at the level.

Per-example forgetting has a long upper tail that a sample of 30 or 60 mostly misses: the estimate then falls
below the mean and the sample's spread is small, so the truth lies above the t-interval more often than below
(up > down). Hall's transformation at the fit tasks' residual skewness (`skew`) corrects for that too, but its
upper end grows without bound as the skewness does: on one machine's demo map (skewness 3.85 in the top stratum)
its intervals were 1.4-2.3x the narrowest an audit alone gives, where these ends gave 0.90-1.17x at the same
coverage (BENCHMARKS.md). The ends are known before any run, as the skewness was.
"""

from __future__ import annotations

import numpy as np

SEED = 100_000  # the calibration's audits: apart from any audit a map draws (forgetmap.predict.audit)
RATIOS = 24_000  # audits over all the folds (at least `LEAST_DRAWS` per fold): about a second in all
LEAST_DRAWS = 200


def studentized_ends(train: np.ndarray, known: np.ndarray, model, method: str, params: dict, audit: np.ndarray,
                     strata: np.ndarray | None, levels, ratios: int = RATIOS) -> dict[float, tuple[float, float]] | None:
    """{level: (up, down)} in t half-widths, from the fit rows `train` (T, U) with the probes at `known`, the
    completion `model` (its `method` and `params`: forgetmap.predict.conformal.fold_predictions), and the map's
    `audit` (positions) drawn by `strata` (each example's stratum, -1 at the probes; None: uniformly). None where
    the map has fewer than 3 fit rows or fewer than 2 audit examples in a stratum (the bound is then t's)."""
    from .conformal import fold_predictions

    train, known, audit = np.asarray(train), np.asarray(known), np.asarray(audit)
    if len(train) < 3:
        return None
    labels = np.zeros(train.shape[1], dtype=np.int64) if strata is None else np.asarray(strata, dtype=np.int64).copy()
    labels[known] = -1
    pools = [np.flatnonzero(labels == h) for h in np.unique(labels) if h >= 0]
    counts = [int(np.sum(np.isin(audit, pool))) for pool in pools]
    if min(counts) < 2:
        return None
    rng = np.random.default_rng(SEED)
    draws = max(LEAST_DRAWS, ratios // len(train))
    drawn = [pool[_uniform_draws(rng, len(pool), count, draws)] for pool, count in zip(pools, counts)]
    found = {float(level): [] for level in levels}
    for row, pred in fold_predictions(train, known, model, method, params):
        z = np.asarray(train[row], dtype=np.float64)
        for level, ratios_found in found.items():
            estimate, half = t_bounds(z, np.asarray(pred, dtype=np.float64), known, pools, drawn, level)
            keep = np.isfinite(estimate) & (half > 0)
            ratios_found.append((estimate[keep] - z.mean()) / half[keep])
    ends = {}
    for level, parts in found.items():
        ratios_all = np.concatenate(parts)
        if not len(ratios_all):
            return None
        low, high = np.quantile(ratios_all, [(1 - level) / 2, (1 + level) / 2])
        ends[level] = (max(0.0, float(-low)), max(0.0, float(high)))  # the estimate inside, always
    return ends


def _uniform_draws(rng, size: int, count: int, draws: int) -> np.ndarray:
    """(draws, count) positions among `size`, each row drawn uniformly without replacement: the `count` smallest
    of `size` uniform keys, in their order, a few rows at a time (at most 2^22 keys held at once); past 2^26 keys in
    all (a corpus of tens of thousands), numpy's own draw of each row, which does not key every example."""
    if size * draws > 1 << 26:
        return np.stack([rng.choice(size, count, replace=False) for _ in range(draws)])
    rows = []
    chunk = max(1, (1 << 22) // size)
    for start in range(0, draws, chunk):
        keys = rng.random((min(chunk, draws - start), size))
        order = np.argpartition(keys, count - 1, axis=1)[:, :count] if count < size else \
            np.tile(np.arange(size), (len(keys), 1))
        rows.append(np.take_along_axis(order, np.argsort(np.take_along_axis(keys, order, axis=1), axis=1), axis=1))
    return np.concatenate(rows)


def t_bounds(z: np.ndarray, forecast: np.ndarray, known: np.ndarray, pools: list[np.ndarray],
             drawn: list[np.ndarray], level: float) -> tuple[np.ndarray, np.ndarray]:
    """(estimate, t half-width) of forgetmap.predict.bound.mean_bound at weight 1 for many audits of one row at
    once: `z` the row's values, `forecast` its completion, the probes at `known`, each stratum's examples (`pools`)
    and the audit examples drawn from each in every draw (`drawn`, (draws, m_h) each); one core
    (forgetmap.predict.bound.stratified_t) computes both."""
    from scipy.stats import t

    from .bound import stratified_t

    corrected = [z[members] - (forecast[members] - forecast[pool].mean()) for pool, members in zip(pools, drawn)]
    estimate, scale, df = stratified_t(float(np.sum(z[known])), len(z), len(known), corrected,
                                       np.array([len(pool) for pool in pools], dtype=np.float64))
    with np.errstate(invalid="ignore"):
        return estimate, t.ppf((1 + level) / 2, df) * scale
