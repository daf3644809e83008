"""A new task's row before its fine-tune (forgetmap.predict.before): slopes on the task's similarity to each example,
shrunk to the column mean where the map's own rows say they do not help, with intervals from the same folds."""

import numpy as np
import pytest

from forgetmap.predict.before import forecast_before, rank_quantile, slopes


def planted(tasks: int, n: int = 400, slope: float = 2.0, noise: float = 0.1, seed: int = 0):
    """Z[t, n] = a_n + b_n s[t, n] + noise: each example forgotten in proportion to the task's similarity to it."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 0.3, n), slope * rng.normal(0, 1, n)
    s = rng.uniform(0, 1, (tasks, n))
    return a + b * s + rng.normal(0, noise, (tasks, n)), s


def test_slopes_recover_a_planted_similarity_and_intervals_hold_their_level():
    z, s = planted(41)
    out = forecast_before(z[:40], s[:40], s[40:], [0.8, 0.9])
    assert out["shrinkage"] < 1 and out["reason"] is None
    error = np.sqrt(np.mean((out["rows"][0] - z[40]) ** 2))
    assert error < 0.5 * np.sqrt(np.mean((z[:40].mean(0) - z[40]) ** 2))  # far closer than the column mean
    for level in (0.8, 0.9):
        covered = np.mean(np.abs(out["rows"][0] - z[40]) <= out["halfwidths"][level])
        assert level - 0.06 < covered < level + 0.08
        assert abs(out["means"][0] - z[40].mean()) <= out["mean_halfwidths"][level]


def test_where_the_similarity_says_nothing_the_forecast_is_the_column_mean():
    z, s = planted(20, slope=0.0, noise=1.0, seed=1)
    out = forecast_before(z, s, np.random.default_rng(2).uniform(0, 1, (2, z.shape[1])), [0.9])
    assert np.isinf(out["shrinkage"])
    np.testing.assert_allclose(out["rows"], np.broadcast_to(z.mean(0), (2, z.shape[1])), rtol=1e-6)
    np.testing.assert_allclose(slopes(z, s, s[:1], np.inf)[0], z.mean(0))


def test_a_map_of_two_rows_forecasts_without_intervals_and_says_why():
    z, s = planted(2)
    out = forecast_before(z, s, s[:1], [0.8, 0.9])
    assert np.isnan(out["halfwidths"][0.9]).all() and np.isnan(out["mean_halfwidths"][0.9])
    assert "2 rows" in out["reason"] and np.isfinite(out["rows"]).all()
    with pytest.raises(ValueError, match="at least 2 rows"):
        forecast_before(z[:1], s[:1], s[:1], [0.9])


def test_the_conformal_rank_needs_enough_scores_for_its_level():
    assert rank_quantile(np.arange(1.0, 10.0), 0.9) == 9.0  # ceil(10 * 0.9) = 9 of 9
    assert np.isnan(rank_quantile(np.arange(1.0, 9.0), 0.9))  # ceil(9 * 0.9) = 9 > 8
