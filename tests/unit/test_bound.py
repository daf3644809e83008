"""The bound on a mean from a forecast and a random sample (forgetmap.predict.bound): the plain estimate and the
forecast's weight tuned on the sample (PPI++), against hand-computed estimators and over many draws of a generated
population (light-tailed errors: where the tuned weight keeps its coverage; the demo's heavy tail is BENCHMARKS.md's)."""

import dataclasses

import numpy as np
import pytest
from scipy.stats import t as student

from forgetmap.predict.bound import crossfit_bound, mean_bound, sample_interval, tuned_weights

N, K, M, LEVEL = 2000, 30, 30, 0.9


def population(kind: str, seed: int = 0):
    """(truth (N,), forecast (N,), probes, the others): heavy-tailed forgetting and a forecast of it that is useless,
    good, or good but shrunk toward zero as a completion shrinks it."""
    rng = np.random.default_rng(seed)
    truth = 0.05 + 0.1 * rng.standard_t(3, size=N)
    noise = 0.03 * rng.normal(size=N)
    forecast = {"useless": 0.1 * rng.normal(size=N), "good": truth + noise, "shrunk": 0.3 * (truth + noise)}[kind]
    known = np.sort(rng.choice(N, K, replace=False))
    return truth, forecast, known, np.setdiff1d(np.arange(N), known)


def test_each_weight_is_the_slope_over_the_rest_of_the_sample():
    rng = np.random.default_rng(1)
    z = rng.normal(size=M)
    f = 0.5 * z + rng.normal(size=M)
    alone = [max(0.0, np.polyfit(np.delete(f, i), np.delete(z, i), 1)[0]) for i in range(M)]
    assert tuned_weights(z, f) == pytest.approx(alone, abs=1e-12)
    assert (tuned_weights(z, -f) == 0).all()  # a forecast that runs against the values is left out
    assert (tuned_weights(z, np.full(M, 0.2)) == 0).all()  # one that does not vary too


def test_a_fixed_weight_is_the_plain_estimate_or_the_sample_alone():
    truth, forecast, known, rest = population("good")
    audit = np.sort(np.random.default_rng(2).choice(rest, M, replace=False))
    others, fpc = N - K, np.sqrt(1 - M / (N - K))
    residual = truth[audit] - forecast[audit]
    plain = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL)  # weight 1 by default
    by_hand = (truth[known].sum() + forecast[rest].sum() + others * residual.mean()) / N
    half = student.ppf(0.95, M - 1) * others / N * residual.std(ddof=1) / np.sqrt(M) * fpc
    assert (plain.estimate, plain.halfwidth, plain.weight) == pytest.approx((by_hand, half, 1.0), rel=1e-12)
    alone = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, weight=0.0)
    sample = sample_interval(truth[audit], LEVEL)
    assert alone.estimate == pytest.approx((truth[known].sum() + others * truth[audit].mean()) / N, rel=1e-12)
    assert alone.halfwidth == pytest.approx(sample.halfwidth * others / N * fpc, rel=1e-12)
    every = crossfit_bound(truth, np.arange(N), truth, truth, LEVEL, "tuned")  # every example measured: the mean
    with pytest.raises(ValueError, match="weight 'best': a number, or 'tuned'"):
        mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, weight="best")
    assert every.lower == every.estimate == every.upper == pytest.approx(truth.mean())


@pytest.mark.parametrize("kind", ["useless", "good", "shrunk"])
def test_the_tuned_bound_covers_and_is_never_wider_than_the_sample(kind):
    """Over 1,000 audit draws: coverage at the level for every forecast and every weight; the tuned interval about
    the sample's own where the forecast is useless, and far narrower than both the sample's and the plain one's
    where a good forecast is shrunk (the plain estimate, weight 1, then wider than it need be)."""
    truth, forecast, known, rest = population(kind)
    rng = np.random.default_rng(3)
    covered, width = {}, {}
    for _ in range(1000):
        audit = np.sort(rng.choice(rest, M, replace=False))
        for name, weight in (("tuned", "tuned"), ("plain", 1.0), ("sample", 0.0)):
            bound = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, weight=weight)
            covered.setdefault(name, []).append(bound.lower <= truth.mean() <= bound.upper)
            width.setdefault(name, []).append(bound.halfwidth)
    for name in covered:
        assert abs(np.mean(covered[name]) - LEVEL) < 0.03, (name, np.mean(covered[name]))
    tuned, plain, sample = (np.mean(width[name]) for name in ("tuned", "plain", "sample"))
    assert tuned < 1.03 * sample
    if kind == "useless":
        assert plain > 1.1 * sample  # weight 1 on a useless forecast widens the interval; tuning does not
    else:
        assert tuned < 0.4 * sample
    if kind == "shrunk":
        assert tuned < 0.5 * plain


def test_a_rare_share_is_covered_where_the_plain_t_interval_collapses():
    """A share of 2 % forgotten past the threshold, forecast with a quarter of its members missed: a draw of 30
    audit examples mostly holds no disagreement, so the plain t-interval on the indicators has width 0 and misses;
    the share's own spread (half a pseudo-example of each pair, `paired_spread`) keeps it at the level or above,
    and an audit with disagreements still gets the plain spread's order of width."""
    from forgetmap.predict.bound import paired_spread, share_bound

    rng = np.random.default_rng(4)
    truth = np.where(rng.random(N) < 0.02, 1.0, 0.0) + 0.01 * rng.random(N)
    forecast = np.where((truth > 0.5) & (rng.random(N) < 0.75), 1.0, 0.0)
    known = np.sort(rng.choice(N, K, replace=False))
    rest = np.setdiff1d(np.arange(N), known)
    share = float(np.mean(truth > 0.5))
    covered = {"share": [], "plain": []}
    for _ in range(1000):
        audit = np.sort(rng.choice(rest, M, replace=False))
        found = share_bound(forecast, known, truth[known], audit, truth[audit], 0.5, LEVEL)
        above = (truth > 0.5) * 1.0
        plain = mean_bound(forecast, known, above[known], audit, above[audit], LEVEL)
        covered["share"].append(found.lower <= share <= found.upper)
        covered["plain"].append(plain.lower <= share <= plain.upper)
        assert found.upper > found.lower and 0 <= found.lower and found.upper <= 1
    assert np.mean(covered["plain"]) < 0.8
    assert np.mean(covered["share"]) >= LEVEL
    z, f = np.r_[np.ones(5), np.zeros(25)], np.r_[np.zeros(5), np.zeros(25)]
    assert paired_spread(z, f, np.ones(M), 0.0) == pytest.approx(np.std(z - f, ddof=1), rel=0.2)
    assert paired_spread(np.zeros(M), np.zeros(M), np.ones(M), 0.0) > 0


def tailed(seed: int = 7):
    """(truth (N,), forecast (N,), fit rows (6, N), probes): forgetting with a long upper tail in a tenth of the
    examples, which the fit rows forgot most too; a forecast that tracks the rest and misses most of the tail."""
    rng = np.random.default_rng(seed)
    liable = rng.random(N) < 0.1
    tail = liable * rng.lognormal(-2.0, 0.6, size=N)
    truth = 0.02 + 0.03 * rng.normal(size=N) + tail
    train = (truth + liable * rng.lognormal(-2.0, 0.6, size=(6, N)) + 0.03 * rng.normal(size=(6, N))).astype(np.float32)
    forecast = truth - 0.7 * tail + 0.03 * rng.normal(size=N)
    return truth, forecast, train, np.sort(rng.choice(N, K, replace=False))


def test_an_audit_drawn_by_strata_is_each_stratum_weighted_by_its_size():
    """The stratified estimate and interval (two strata of the fit rows' mean |Z|) as written out by hand: each
    stratum's corrected mean about its own forecast mean weighted by its share of the others, the variance with
    each stratum's finite population, Welch and Satterthwaite's degrees of freedom, the ends scaling t's half-width;
    one stratum is the uniform audit's bound exactly."""
    from forgetmap.predict.audit import audit_draw
    from helpers import refit_strata

    truth, forecast, train, known = tailed()
    audit, labels = audit_draw(train, known, 60, 0)
    assert labels.tolist() == refit_strata(train, known).tolist()
    for weight, ends in ((1.0, None), (0.0, None), (1.0, (1.3, 0.8))):
        found = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, weight=weight, strata=labels,
                           ends=ends)
        others = np.setdiff1d(np.arange(N), known)
        parts = [(others[labels[others] == h], audit[labels[audit] == h]) for h in (0, 1)]
        share = np.array([len(p) for p, _ in parts]) / len(others)
        corrected = [truth[a] - weight * (forecast[a] - forecast[p].mean()) for p, a in parts]
        estimate = (truth[known].sum() + len(others) * sum(w * c.mean() for w, c in zip(share, corrected))) / N
        terms = [w ** 2 * c.var(ddof=1) / len(a) for w, c, (_, a) in zip(share, corrected, parts)]
        kept = [t * (1 - len(a) / len(p)) for t, (p, a) in zip(terms, parts)]
        df = sum(kept) ** 2 / sum(t ** 2 / (len(a) - 1) for t, (_, a) in zip(kept, parts))
        half = student.ppf((1 + LEVEL) / 2, df) * len(others) / N * np.sqrt(sum(kept))
        up, down = ends or (1.0, 1.0)
        assert (found.estimate, found.lower, found.upper) == pytest.approx(
            (estimate, estimate - down * half, estimate + up * half), rel=1e-10)
    uniform = np.where(labels >= 0, 0, -1)
    by_strata = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, strata=uniform)
    plain = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL)
    # field by field: pytest 9.2's approx compares no dataclass
    assert dataclasses.astuple(by_strata) == pytest.approx(dataclasses.astuple(plain), rel=1e-12, nan_ok=True)


def test_one_core_bounds_one_audit_and_many_alike_missing_values_included():
    """forgetmap.predict.bound.stratified_t for many audits at once (the ends' calibration, predict.ends.t_bounds)
    gives each audit's bound exactly as mean_bound gives it alone, uniform or by strata, where some audited examples
    have no value (left out of their audit by both), and no bound in a draw whose stratum keeps fewer than two."""
    from forgetmap.predict.audit import audit_draw
    from forgetmap.predict.ends import t_bounds

    truth, forecast, train, known = tailed()
    labels = audit_draw(train, known, 60, 0)[1]
    z = truth.copy()
    z[np.random.default_rng(3).choice(N, N // 10, replace=False)] = np.nan
    z[known] = truth[known]
    rng = np.random.default_rng(5)
    for strata in (labels, None):
        pools = [np.flatnonzero(labels == h) for h in (0, 1)] if strata is not None else \
            [np.setdiff1d(np.arange(N), known)]
        sizes = (48, 12) if strata is not None else (60,)
        drawn = [np.stack([rng.choice(pool, m, replace=False) for _ in range(8)]) for pool, m in zip(pools, sizes)]
        if strata is not None:  # a draw whose second stratum keeps one value: no bound from either path
            drawn[1][7] = np.r_[np.flatnonzero(np.isnan(z) & (labels == 1))[:11],
                                np.flatnonzero(np.isfinite(z) & (labels == 1))[:1]]
        estimate, half = t_bounds(z, forecast, known, pools, drawn, LEVEL)
        for d in range(8):
            audit = np.sort(np.concatenate([members[d] for members in drawn]))
            bound = mean_bound(forecast, known, z[known], audit, z[audit], LEVEL, strata=strata)
            assert (estimate[d], half[d]) == pytest.approx((bound.estimate, bound.halfwidth), rel=1e-9, nan_ok=True)
        assert np.isfinite(estimate[:7]).all() and (np.isnan(estimate[7]) == (strata is not None))


def test_strata_hold_the_tail_a_uniform_audit_misses():
    """Over 1,000 audits of 60: drawn uniformly, the mean's t-interval misses more often than the level allows (the
    forecast misses a tail that is in a tenth of the examples, absent from many draws); drawn by the fit rows'
    strata, it covers at the level and is narrower (t's interval: 0.855 against 0.907, 0.71x as wide). A share's bound is weighted by the strata too, and covers."""
    from forgetmap.predict.audit import audit_draw
    from forgetmap.predict.bound import share_bound

    truth, forecast, train, known = tailed()
    labels = audit_draw(train, known, 60, 0)[1]
    others = labels >= 0
    covered, width = {"t": [], "strata": [], "share": []}, {"t": [], "strata": []}
    over = float(np.quantile(truth, 0.95))
    for seed in range(1000):
        uniform = np.sort(np.random.default_rng(seed).choice(np.flatnonzero(others), 60, replace=False))
        drawn = audit_draw(train, known, 60, seed)[0]
        for name, audit, strata in (("t", uniform, None), ("strata", drawn, labels)):
            bound = mean_bound(forecast, known, truth[known], audit, truth[audit], LEVEL, strata=strata)
            covered[name].append(bound.lower <= truth.mean() <= bound.upper)
            width[name].append(bound.halfwidth)
        share = share_bound(forecast, known, truth[known], drawn, truth[drawn], over, LEVEL, strata=labels)
        covered["share"].append(share.lower <= np.mean(truth > over) <= share.upper)
    assert np.mean(covered["t"]) < LEVEL - 0.02 and np.mean(covered["strata"]) >= LEVEL - 0.01
    assert np.mean(covered["share"]) >= LEVEL - 0.01
    assert np.mean(width["strata"]) < 0.8 * np.mean(width["t"])


def test_a_stratified_samples_weights_are_the_slope_within_strata_pooled():
    rng = np.random.default_rng(8)
    groups = np.r_[np.zeros(20, int), np.ones(10, int)]
    z = rng.normal(size=M) + 3 * groups
    f = 0.5 * z + rng.normal(size=M) - 5 * groups  # the strata's levels differ: a slope across them would mislead

    def pooled(keep):
        zc = np.concatenate([z[keep & (groups == h)] - z[keep & (groups == h)].mean() for h in (0, 1)])
        fc = np.concatenate([f[keep & (groups == h)] - f[keep & (groups == h)].mean() for h in (0, 1)])
        return max(0.0, float(fc @ zc / (fc @ fc)))

    by_hand = [pooled(np.arange(M) != i) for i in range(M)]
    assert tuned_weights(z, f, groups) == pytest.approx(by_hand, abs=1e-12)
    assert tuned_weights(z, f, np.zeros(M, int)) == pytest.approx(tuned_weights(z, f), abs=1e-12)
