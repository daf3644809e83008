"""A map at a fraction of its cells (forgetmap.fractional): designs that are nested in the fraction and leave a
task's cells alone when another is added, the balanced design's even cover, and a completion that recovers a
low-rank map from its measured cells with intervals that cover at their level."""

import numpy as np
import pytest

from forgetmap import fractional

TASKS = [f"task_{i}" for i in range(12)]
IDS = [f"ex-{j:05d}" for j in range(600)]
SOURCES = np.array(["a", "b", "c"])[np.arange(600) % 3]


@pytest.mark.parametrize("kind", ["uniform", "stratified", "balanced"])
def test_a_design_is_nested_in_its_fraction_and_keeps_each_tasks_cells_when_one_is_added(kind):
    small = fractional.design(kind, 0.2, TASKS, IDS, SOURCES)
    large = fractional.design(kind, 0.3, TASKS, IDS, SOURCES)
    assert small.mean() == pytest.approx(0.2, abs=0.02) and large.mean() == pytest.approx(0.3, abs=0.02)
    assert not (small & ~large).any()  # every cell the smaller fraction measured, the larger measures too
    grown = fractional.design(kind, 0.2, TASKS + ["a_new_task"], IDS, SOURCES)
    assert (grown[:-1] == small).all() and grown[-1].any()
    assert (fractional.design(kind, 0.2, TASKS, IDS, SOURCES) == small).all()  # the same cells every time
    assert fractional.design(kind, 1.0, TASKS, IDS, SOURCES).all()


def test_the_balanced_design_covers_every_example_almost_equally_and_the_stratified_each_source():
    balanced = fractional.design("balanced", 0.3, TASKS, IDS)
    cover = balanced.sum(axis=0)
    assert cover.min() >= 0.3 * len(TASKS) - 2 and cover.max() <= 0.3 * len(TASKS) + 2
    uniform = fractional.design("uniform", 0.3, TASKS, IDS).sum(axis=0)
    assert uniform.min() < cover.min() and uniform.max() > cover.max()  # a hash per cell: binomial cover
    stratified = fractional.design("stratified", 0.3, TASKS, IDS, SOURCES)
    for source in "abc":
        assert (stratified[:, SOURCES == source].sum(axis=1) == 60).all()


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, "half", True])
def test_a_fraction_outside_zero_to_one_is_refused_naming_it(fraction):
    with pytest.raises(ValueError, match=r"cells: .* is not a fraction in \(0, 1\]"):
        fractional.design("uniform", fraction, TASKS, IDS)
    with pytest.raises(ValueError, match="design: 'sideways' is not one of uniform, stratified, balanced, leverage"):
        fractional.design("sideways", 0.3, TASKS, IDS)


def low_rank(seed: int = 0, noise: float = 0.05):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(len(TASKS), 2)), rng.normal(size=(len(IDS), 2))
    level = np.array([0.5, -0.2, 0.1])[np.arange(len(IDS)) % 3]
    return a @ b.T * 0.3 + level + noise * rng.normal(size=(len(TASKS), len(IDS)))


def test_the_completion_recovers_a_low_rank_map_and_its_intervals_cover_at_their_level():
    z = low_rank()
    for kind in ("balanced", "uniform"):
        mask = fractional.design(kind, 0.3, TASKS, IDS, SOURCES)
        fit = fractional.complete(z, mask, SOURCES)
        hidden = ~mask
        assert (fit.values[mask] == z[mask]).all()
        rmse = np.sqrt(np.mean((fit.values[hidden] - z[hidden]) ** 2))
        means = fractional.source_means(z, mask, SOURCES)  # each task's mean of each source: the rank-0 fit
        assert rmse < 0.6 * np.sqrt(np.mean((means[hidden] - z[hidden]) ** 2)) and fit.rank >= 2
        for level in (0.8, 0.9):
            covered = np.mean(np.abs(fit.values[hidden] - z[hidden]) <= fit.halfwidths[level][hidden])
            assert level - 0.03 <= covered <= level + 0.1  # each fold fits on 9/10 of the cells: a little wide
            assert (fit.halfwidths[level][mask] == 0).all()


def test_the_completion_reads_no_unmeasured_cell():
    z = low_rank(1)
    mask = fractional.design("balanced", 0.3, TASKS, IDS)
    scrambled = np.where(mask, z, np.random.default_rng(2).normal(scale=100, size=z.shape))
    scrambled[~mask & (np.arange(len(IDS)) % 7 == 0)] = np.nan
    one, two = fractional.complete(z, mask, levels=(0.9,)), fractional.complete(scrambled, mask, levels=(0.9,))
    assert np.array_equal(one.values, two.values) and np.array_equal(one.halfwidths[0.9], two.halfwidths[0.9])


def test_r2_on_measured_cells_sees_the_rank_of_the_map():
    z = low_rank(3, noise=0.0) - np.array([0.5, -0.2, 0.1])[np.arange(len(IDS)) % 3]
    mask = fractional.design("balanced", 0.5, TASKS, IDS)
    r2 = fractional.masked_r2(z, mask, 3)
    assert r2[0] < 0.9 and r2[1] > 0.999 and r2[2] >= r2[1] - 1e-4


def test_a_measured_cell_without_a_value_stays_without_one():
    """An empty scored span is measured as NaN: the completion neither fits it nor makes a value up for it."""
    z = low_rank(4)
    mask = fractional.design("balanced", 0.3, TASKS, IDS)
    empty = np.flatnonzero(mask[0])[:3]
    z[0, empty] = np.nan
    fit = fractional.complete(z, mask, levels=(0.9,))
    assert np.isnan(fit.values[0, empty]).all() and np.isfinite(fit.values[~mask]).all()
    assert (fit.halfwidths[0.9][mask] == 0).all() and not fit.measured[0, empty].any()
