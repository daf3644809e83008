"""The margins' estimate of a benchmark's accuracy, F and BT (forgetmap.correctness.margins), against a plain
recomputation and on populations whose margins move as fine-tuning moves them (not the demo's quiz)."""

from __future__ import annotations

import numpy as np
import pytest


def population(seed: int, run: int = 0, n: int = 300, shift: float = -0.8, slope: float = 0.9, noise: float = 1.2):
    """Margins at the baseline (heavy-tailed, mostly right; `seed`) and after run `run`, which moves them together
    with an item-level noise of its own: (base, now)."""
    base = np.random.default_rng(seed).standard_t(4, n) * 2.5 + 1.5
    return base, shift + slope * base + noise * np.random.default_rng(1000 + run).standard_t(5, n)


def plain_chances(base, known, now, values, near=20):
    """Each item's share of the k residuals that leave it right, fitted item by item (np.polyfit); an item wrong at
    the baseline over the residuals of the `near` scored items nearest it in baseline margin."""
    slope, shift = np.polyfit(base[known], now, 1)
    residuals = now - (shift + slope * base[known])

    def pool(u):
        if u > 0 or len(known) <= near:
            return residuals
        return residuals[np.argsort(np.abs(base[known] - u), kind="stable")[:near]]
    row = np.array([np.mean(shift + slope * u + pool(u) > 0) for u in base])
    row[known] = values
    return row


def test_each_items_chance_is_the_share_of_the_k_residuals_that_leave_it_right():
    from forgetmap.correctness.margins import chances, estimate, per_item_rates

    base, now = population(0)
    known = np.sort(np.random.default_rng(1).choice(len(base), 30, replace=False))
    values = (now[known] > 0).astype(float)
    row = chances(base, known, now[known], values)
    assert np.allclose(row, plain_chances(base, known, now[known], values), atol=1e-12)
    assert (base <= 0).sum() > 20  # items wrong at the baseline, each over its 20 nearest residuals
    pooled = plain_chances(base, known, now[known], values, near=len(known))
    assert not np.allclose(row[base <= 0], pooled[base <= 0]) and np.array_equal(row[base > 0], pooled[base > 0])
    few = known[:20]  # from 20 items or fewer every item takes all of them
    assert np.allclose(chances(base, few, now[few], values[:20]), plain_chances(base, few, now[few], values[:20], 20))
    assert np.array_equal(row[known], values)  # the scored items as measured
    before = (base > 0).astype(float)
    found, spread, same = estimate(base, known, now[known], values, before)
    assert np.array_equal(same, row)
    assert found["F"] == pytest.approx(np.mean(before * (1 - row)))
    assert found["BT"] == pytest.approx(np.mean((1 - before) * row))
    assert found["acc"] == pytest.approx(row.mean())
    assert all(spread[r] > 0 for r in ("acc", "F", "BT"))
    # the bootstrap's rows resample the k and keep them as measured
    from forgetmap.correctness.margins import resampled_chances

    rows = resampled_chances(base, known, now[known], values, resamples=50, seed=2)
    assert rows.shape == (50, len(base)) and np.array_equal(rows[:, known], np.tile(values, (50, 1)))
    assert np.std(per_item_rates(before, rows)["F"], ddof=1) > 0


def test_the_margins_estimate_is_nearer_than_the_k_items_own_share_and_its_calibrated_interval_covers():
    from forgetmap.correctness.margins import calibration, margin_rates

    base, _ = population(0)
    before = (base > 0).astype(float)
    options = np.full(len(base), 4)
    # the map's rows: other runs of the same base, moved by other shifts and slopes
    rows = [population(0, run, shift=s, slope=c, noise=e)[1] for run, (s, c, e) in
            enumerate([(-0.5, 0.95, 1.0), (-1.2, 0.85, 1.4), (-0.3, 1.0, 0.9), (-1.0, 0.9, 1.3), (-0.7, 0.8, 1.1)])]
    factors = calibration(base, before, np.stack(rows), (np.stack(rows) > 0).astype(float), 30, 0.9, draws=20,
                          resamples=100)
    assert all(1.0 < factors[r] < 6.0 for r in ("acc", "F", "BT"))
    rng = np.random.default_rng(7)
    model_errors, naive_errors, covered = [], [], []
    for run in range(60):  # new runs of the same base, each with its own shift
        _, now = population(0, 10 + run, shift=-0.4 - 0.01 * run, slope=0.9, noise=1.1 + 0.004 * run)
        truth = np.mean(before * (now <= 0))
        known = np.sort(rng.choice(len(base), 30, replace=False))
        values = (now[known] > 0).astype(float)
        _, found = margin_rates(base, known, now[known], values, before, options, factors, seed=run)
        bound = found["all"]["F"]
        model_errors.append(abs(bound.estimate - truth))
        naive_errors.append(abs(np.mean(before[known] * (1 - values)) - truth))
        covered.append(bound.lower <= truth <= bound.upper)
        assert bound.lower <= bound.estimate <= bound.upper
        assert found["all"]["F_true"].estimate <= bound.estimate
    assert np.mean(model_errors) < 0.6 * np.mean(naive_errors)
    assert np.mean(covered) >= 0.8


def test_a_benchmarks_scopes_are_means_of_the_same_chances():
    from forgetmap.correctness.margins import chances, margin_rates

    base, now = population(3, n=120)
    before = (base > 0).astype(float)
    known = np.arange(0, 120, 4)
    values = (now[known] > 0).astype(float)
    members = {"one": np.arange(60), "two": np.arange(60, 120)}
    factors = {"acc": 2.0, "F": 2.0, "BT": 2.0}
    row, found = margin_rates(base, known, now[known], values, before, np.full(120, 3), factors, members)
    assert np.array_equal(row, chances(base, known, now[known], values))
    for name, where in members.items():
        assert found[name]["F"].estimate == pytest.approx(np.mean(before[where] * (1 - row[where])))
    whole = np.mean([found[n]["acc"].estimate for n in members])
    assert found["all"]["acc"].estimate == pytest.approx(whole)
