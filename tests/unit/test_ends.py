"""The bound's ends as the map's fit tasks place the truth (forgetmap.predict.ends): the vectorized t-bounds are
mean_bound's, the ends are about t's where the errors are symmetric and reach further up where they have a long
upper tail, an interval at them covers a new row's mean at the level where t's falls short, and there are none
where the map cannot give them."""

import numpy as np
import pytest

from forgetmap.predict.bound import mean_bound
from forgetmap.predict.ends import studentized_ends, t_bounds
from forgetmap.predict.registry import make_method

U, K, M, LEVEL = 1200, 20, 40, 0.9


def rows(tail: str, count: int, seed: int) -> np.ndarray:
    """`count` rows of forgetting: a shared profile at each row's scale, plus errors symmetric (normal) or with a
    long upper tail (lognormal, centred), as per-example forgetting has."""
    rng = np.random.default_rng(seed)
    profile = np.abs(rng.normal(size=U))
    scale = rng.uniform(0.5, 1.5, size=(count, 1))
    if tail == "symmetric":
        errors = rng.normal(size=(count, U)) * 0.4
    else:
        errors = rng.lognormal(0.0, 1.3, size=(count, U)) * 0.15
        errors -= errors.mean(axis=1, keepdims=True)
    return (scale * profile + errors).astype(np.float32)


def setting(tail: str, seed: int = 0, fit: int = 12):
    train = rows(tail, fit, seed)
    known = np.sort(np.random.default_rng(seed + 1).choice(U, K, replace=False))
    model = make_method("mf", rank=2).fit(train)
    strata = np.zeros(U, dtype=np.int64)
    strata[known] = -1
    top = np.setdiff1d(np.argsort(-np.abs(train).mean(axis=0))[:120], known)
    strata[top] = 1
    rest = np.flatnonzero(strata >= 0)
    audit = np.sort(np.r_[np.random.default_rng(seed + 2).choice(np.flatnonzero(strata == 0), M - 15, replace=False),
                          np.random.default_rng(seed + 3).choice(np.flatnonzero(strata == 1), 15, replace=False)])
    return train, known, model, strata, audit, rest


def test_the_vectorized_bounds_are_mean_bounds_at_weight_one():
    train, known, model, strata, _, _ = setting("skewed")
    z = train[0].astype(np.float64)
    forecast = model.predict(known[None, :], z[known][None, :])[0].astype(np.float64)
    rng = np.random.default_rng(4)
    for labels in (strata, None):
        pools = [np.flatnonzero(strata == h) for h in (0, 1)] if labels is not None else \
            [np.setdiff1d(np.arange(U), known)]
        drawn = [np.stack([rng.choice(pool, m, replace=False) for _ in range(5)])
                 for pool, m in zip(pools, (M - 15, 15) if labels is not None else (M,))]
        estimate, half = t_bounds(z, forecast, known, pools, drawn, LEVEL)
        for d in range(5):
            audit = np.sort(np.concatenate([members[d] for members in drawn]))
            bound = mean_bound(forecast, known, z[known], audit, z[audit], LEVEL, strata=labels)
            assert (estimate[d], half[d]) == pytest.approx((bound.estimate, bound.halfwidth), rel=1e-9)


def test_symmetric_errors_give_about_ts_ends_and_a_long_upper_tail_longer_upper_ends():
    for seed in range(2):
        train, known, model, strata, audit, _ = setting("symmetric", seed)
        up, down = studentized_ends(train, known, model, "mf", {"rank": 2}, audit, strata, [LEVEL])[LEVEL]
        assert 0.9 < down < 1.1 and 0.9 < up < 1.1
        train, known, model, strata, audit, _ = setting("skewed", seed)
        up, down = studentized_ends(train, known, model, "mf", {"rank": 2}, audit, strata, [LEVEL])[LEVEL]
        assert up > 1.15 and up > down + 0.2


def test_an_interval_at_the_ends_covers_a_new_rows_mean_at_the_level_where_ts_falls_short():
    """Fit rows and a new row of the same kind (long upper tail): over 600 audits drawn as the map's was, the new
    row's mean lies inside [estimate - down h, estimate + up h] at about the level; inside t's less often."""
    train, known, model, strata, audit, _ = setting("skewed", seed=3)
    ends = studentized_ends(train, known, model, "mf", {"rank": 2}, audit, strata, [LEVEL])[LEVEL]
    new = rows("skewed", 40, seed=9).astype(np.float64)
    rng = np.random.default_rng(8)
    covered = {"ends": [], "t": []}
    for z in new:
        forecast = model.predict(known[None, :], z[known][None, :])[0].astype(np.float64)
        for _ in range(15):
            drawn = np.sort(np.r_[rng.choice(np.flatnonzero(strata == 0), M - 15, replace=False),
                                  rng.choice(np.flatnonzero(strata == 1), 15, replace=False)])
            for name, given in (("ends", ends), ("t", None)):
                bound = mean_bound(forecast, known, z[known], drawn, z[drawn], LEVEL, strata=strata, ends=given)
                covered[name].append(bound.lower <= z.mean() <= bound.upper)
                assert bound.lower <= bound.estimate <= bound.upper
    assert np.mean(covered["t"]) < LEVEL - 0.02 and np.mean(covered["ends"]) >= LEVEL - 0.015


def test_no_ends_without_three_fit_rows_or_two_audit_examples_in_a_stratum():
    train, known, model, strata, audit, _ = setting("skewed")
    assert studentized_ends(train[:2], known, model, "mf", {"rank": 2}, audit, strata, [LEVEL]) is None
    lone = np.r_[audit[strata[audit] == 0], audit[strata[audit] == 1][:1]]
    assert studentized_ends(train, known, model, "mf", {"rank": 2}, lone, strata, [LEVEL]) is None


def test_the_calibrations_audits_are_uniform_draws_without_replacement_small_or_large():
    """Keyed draws (a map's few thousand examples) and numpy's own (past 2^26 keys: a large corpus) alike: each
    draw distinct positions, every position drawn about equally often."""
    from forgetmap.predict.ends import _uniform_draws

    for size, count, draws in ((300, 12, 4000), (70_000, 12, 1000)):
        rows = _uniform_draws(np.random.default_rng(0), size, count, draws)
        assert rows.shape == (draws, count) and all(len(set(row)) == count for row in rows)
        assert rows.min() >= 0 and rows.max() < size
        if size == 300:
            found = np.bincount(rows.ravel(), minlength=size)
            assert abs(found.mean() - draws * count / size) < 1e-9 and found.std() < 2 * np.sqrt(found.mean())
        else:
            assert abs(rows.mean() - (size - 1) / 2) < 0.02 * size
