"""A benchmark's accuracy, F and BT from the option margins of k scored items: a model's estimate, beside the
completion's design estimate (forgetmap.correctness.forecast.bounded_rates), and nearer than it for F.

A multiple-choice item's margin is its gold option's score minus the best other's (forgetmap.correctness.items.
choose): right where it is above 0. The forgetting monitor scores every item at the baseline, so each item's
margin there, u, is known; at a check it scores k items drawn at random, so their margins now, v, are known too.
Fine-tuning moves margins together: over the demo's checks v correlates 0.87-0.99 with u. Over the k scored items
v is regressed on u (least squares, a shift and a slope), and every other item's margin now is taken as its fitted
value plus a residual of the k's, each equally likely, so its chance of being right now is

    p_i = share of the k residuals r_j with a + c u_i + r_j > 0     (`chances`; the k themselves as measured).

An item wrong at the baseline (u_i <= 0) takes that share over the residuals of the `NEAR` scored items whose
baseline margins are nearest its own, not over all k: the few items wrong at the baseline move otherwise than the
many right ones (their residuals spread differently), and BT is theirs alone. Where k is at most NEAR every item
takes all k. NEAR = 20 gave the least BT error of 6, 10, 15 and 20 on the demo map's own rows (its 12 fit tasks,
draws of 30, 60 and 100 items; larger was not tried), chosen there, never on the tasks it is judged on; on those (the demo's check tasks) it cut BT's
error by 11-38 % and the accuracy's by 3-14 %, F's unchanged (an item right at the baseline is as before).

Each rate is the mean over the N items of its per-item quantity (acc: p; F: right at the baseline and p's
complement; BT: wrong at the baseline and p) at those chances. A 0/1 flip carries a p(1 - p) variance that a
design's correction pays in full from k items (F's error 0.036 from 30 on the demo: the completion's); the model
averages it over all N and pays instead its own misfit (F's error 0.022 from 30, 0.017 from 60: BENCHMARKS.md).

Its spread over the draw of the k is a bootstrap's (`resampled_chances`: the k resampled with replacement and the
fit redone, `RESAMPLES` times), but the misfit is bias, which a bootstrap does not see (a normal interval on it
falls well short of its level). So the interval is estimate ± f · sd with f calibrated on the item map's rows,
other runs of the same base whose margins at every item are known (`calibration`): on each row, draws of k items
as the monitor draws them, f the conformal quantile at the level of |estimate − the row's rate| / sd. It promises
what a map's row promises for a new run of the same base: exchangeability with the map's rows, not a design's
guarantee (on the demo, at 0.9, F's covered 0.84-0.95 over two machines' runs, the accuracy's 0.87-0.91 and BT's
0.89-0.93: BENCHMARKS.md).

Only multiple-choice items have margins: a benchmark with free-form items is watched through the completion.
"""

from __future__ import annotations

import numpy as np

RESAMPLES = 200
NEAR = 20  # an item wrong at the baseline draws its residual from the 20 scored items nearest it (where k > 20)
CALIBRATION_DRAWS = 20
RATES = ("acc", "F", "BT")
CHUNK = 1 << 22  # resamples x items x k booleans compared at once


def _fits(base: np.ndarray, now: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shift, slope, residuals) of least squares of `now` on `base`, each row (B, k) its own fit; a row whose base
    margins do not vary gets slope 0."""
    centred = base - base.mean(axis=1, keepdims=True)
    spread = (centred * centred).sum(axis=1)
    covariance = (centred * (now - now.mean(axis=1, keepdims=True))).sum(axis=1)
    slope = np.divide(covariance, spread, out=np.zeros_like(spread), where=spread > 1e-12)
    shift = now.mean(axis=1) - slope * base.mean(axis=1)
    return shift, slope, now - (shift[:, None] + slope[:, None] * base)


def _chances_of(base: np.ndarray, known_base: np.ndarray, known_now: np.ndarray) -> np.ndarray:
    """(B, N) every item's chance of being right now under each of B fits (rows of `known_base`, `known_now`): an item
    right at the baseline over all k residuals, a wrong one over its `NEAR` nearest (`_near_residuals`)."""
    shift, slope, residuals = _fits(known_base, known_now)
    fitted = shift[:, None] + slope[:, None] * base[None, :]
    k = residuals.shape[1]
    by_nearest = (base <= 0) & (k > NEAR)
    pooled, wrong = np.flatnonzero(~by_nearest), np.flatnonzero(by_nearest)
    out = np.empty(fitted.shape)
    step = max(1, CHUNK // max(1, len(pooled) * k))
    for start in range(0, len(fitted), step):
        part = slice(start, start + step)
        out[part, pooled] = ((fitted[part, pooled, None] + residuals[part, None, :]) > 0).mean(axis=2)
    if len(wrong):
        near = _near_residuals(base[wrong], known_base, residuals)
        out[:, wrong] = ((fitted[:, wrong, None] + near) > 0).mean(axis=2)
    return out


def _near_residuals(items: np.ndarray, known_base: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """(B, len(items), NEAR) for each item the residuals of the NEAR scored items whose baseline margins are nearest
    its own, under each of B fits (rows of `known_base`, `residuals`)."""
    out = np.empty((len(known_base), len(items), NEAR))
    step = max(1, CHUNK // max(1, len(items) * known_base.shape[1]))
    for start in range(0, len(known_base), step):
        part = slice(start, start + step)
        distance = np.abs(items[None, :, None] - known_base[part, None, :])
        nearest = np.argsort(distance, axis=2, kind="stable")[:, :, :NEAR]
        out[part] = np.take_along_axis(residuals[part, None, :], nearest, axis=2)
    return out


def chances(base: np.ndarray, known: np.ndarray, now: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(N,) each item's chance of being right now from the baseline's margins `base` (N,) and the margins `now` (k,)
    of the items at `known`, those k kept as measured (`values`, 0/1)."""
    base = np.asarray(base, dtype=np.float64)
    row = _chances_of(base, base[known][None, :], np.asarray(now, dtype=np.float64)[None, :])[0]
    row[known] = values
    return row


def resampled_chances(base: np.ndarray, known: np.ndarray, now: np.ndarray, values: np.ndarray,
                      resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """(resamples, N) `chances` with the k items resampled with replacement for each fit (the measured k kept as
    measured): the bootstrap of the model's estimate over the draw of the k."""
    base, now = np.asarray(base, dtype=np.float64), np.asarray(now, dtype=np.float64)
    drawn = np.random.default_rng(seed).integers(0, len(known), size=(resamples, len(known)))
    rows = _chances_of(base, base[known][drawn], now[drawn])
    rows[:, known] = values
    return rows


def per_item_rates(before: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """{rate: its mean over the items of each row of chances (the last axis)}: acc, F, BT against `before`."""
    return {"acc": rows.mean(axis=-1), "F": (before * (1 - rows)).mean(axis=-1),
            "BT": ((1 - before) * rows).mean(axis=-1)}


def estimate(base: np.ndarray, known: np.ndarray, now: np.ndarray, values: np.ndarray, before: np.ndarray,
             resamples: int = RESAMPLES, seed: int = 0) -> tuple[dict[str, float], dict[str, float], np.ndarray]:
    """({rate: the model's estimate}, {rate: its bootstrap standard deviation}, the chances row (N,))."""
    before = np.asarray(before, dtype=np.float64)
    row = chances(base, known, now, values)
    spread = per_item_rates(before, resampled_chances(base, known, now, values, resamples, seed))
    found = per_item_rates(before, row)
    return ({r: float(found[r]) for r in RATES}, {r: float(np.std(spread[r], ddof=1)) for r in RATES}, row)


def calibration(base: np.ndarray, before: np.ndarray, rows_margins: np.ndarray, rows_correct: np.ndarray, k: int,
                level: float, draws: int = CALIBRATION_DRAWS, resamples: int = RESAMPLES,
                seed: int = 0) -> dict[str, float]:
    """{rate: f}: on each of the map's rows (its margins and 0/1 correctness at every item, (R, N)), `draws` draws
    of k items at random, f the ⌈(n + 1) level⌉-th smallest of the n = R · draws ratios |estimate − the row's rate|
    / bootstrap sd (inf where there are too few for the level). `base` and `before`: the run's baseline margins
    and correctness (the map's base's, which the monitor checks)."""
    from ..predict.conformal import quantile

    base, before = np.asarray(base, dtype=np.float64), np.asarray(before, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ratios = {r: [] for r in RATES}
    for margins, correct in zip(np.asarray(rows_margins, dtype=np.float64), np.asarray(rows_correct, np.float64)):
        truth = per_item_rates(before, correct)
        for _ in range(draws):
            known = np.sort(rng.choice(len(base), k, replace=False))
            found, spread, _ = estimate(base, known, margins[known], correct[known], before, resamples,
                                        int(rng.integers(2**31)))
            for r in RATES:
                error = abs(found[r] - float(truth[r]))
                ratios[r].append(0.0 if error == 0 else error / spread[r] if spread[r] > 0 else np.inf)
    return {r: quantile(np.array(ratios[r]), level) for r in RATES}


def margin_rates(base: np.ndarray, known: np.ndarray, now: np.ndarray, values: np.ndarray, before: np.ndarray,
                 options: np.ndarray, factors: dict[str, float], members: dict[str, np.ndarray] | None = None,
                 seed: int = 0) -> tuple[np.ndarray, dict[str, dict]]:
    """(the chances row (N,), {scope: {rate: MeanBound}}): acc, F, BT and their chance-adjusted forms, each the
    model's estimate ± `factors[rate]` (`calibration`) times its bootstrap sd, clipped to [0, 1]; scope `all` the
    items, and each of `members` (a benchmark's positions among the items) by its own mean of the same chances."""
    from ..predict.bound import MeanBound
    from .forecast import chance_adjusted

    before = np.asarray(before, dtype=np.float64)
    row = chances(base, known, now, values)
    resampled = resampled_chances(base, known, now, values, seed=seed)
    out = {}
    for scope, where in {"all": np.arange(len(row)), **(members or {})}.items():
        found, spread = per_item_rates(before[where], row[where]), per_item_rates(before[where], resampled[:, where])
        bounds = {}
        for rate in RATES:
            half = factors[rate] * float(np.std(spread[rate], ddof=1))
            centre = float(found[rate])
            bounds[rate] = MeanBound(centre, max(0.0, centre - half), min(1.0, centre + half))
        out[scope] = {**bounds, **chance_adjusted(bounds, before[where], row[where], np.asarray(options)[where])}
    return row, out
