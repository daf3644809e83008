"""Which examples to measure (D-optimal, medoids, random) and how sure each prediction is (conformal)."""

import numpy as np
import pytest

from forgetmap.predict.conformal import ColumnScale, quantile
from forgetmap.predict.probes import choose_probes, dopt, medoids
from forgetmap.predict.protocol import run_split


def degenerate_matrix(seed: int = 0):
    """Rank 2 without noise; 990 of 1,000 columns load on factor 1 alone: only 10 reveal factor 2."""
    rng = np.random.default_rng(seed)
    v = np.zeros((2, 1000))
    v[0] = rng.uniform(0.5, 1.5, 1000)
    v[1, :10] = rng.uniform(1.0, 2.0, 10)
    u = rng.normal(size=(30, 2))
    return (u @ v).astype(np.float32), [f"t{i}" for i in range(30)]


def test_d_optimal_probes_beat_a_degenerate_random_draw():
    z, tasks = degenerate_matrix()
    dopt_run = run_split(z, tasks, tasks[:24], tasks[24:], "mf", {"rank": 2, "reg": 1e-6}, 6, [0], probes="dopt")
    # D-optimal reveals a column that carries factor 2: the fold-in then identifies both weights exactly
    assert np.isin(dopt_run[1][0], np.arange(10)).any()
    assert dopt_run[2][0]["rmse"] < 1e-3
    degenerate = 0
    for seed in range(10):  # 6 random columns of 1,000 miss the 10 informative ones ~94 % of the time
        known = choose_probes("random", 1000, 6, seed)
        random_run = run_split(z, tasks, tasks[:24], tasks[24:], "mf", {"rank": 2, "reg": 1e-6}, 6, [seed])
        if not np.isin(known, np.arange(10)).any():
            degenerate += 1
            assert random_run[2][0]["rmse"] > 100 * dopt_run[2][0]["rmse"] + 0.05
    assert degenerate >= 8


def test_greedy_d_optimal_takes_the_largest_determinant_step_and_never_repeats():
    rng = np.random.default_rng(1)
    phi = np.c_[np.ones(200), rng.normal(size=(200, 3))]
    chosen = dopt(phi, 5, 0.1)
    assert len(set(chosen)) == 5
    # the first pick is the column of largest norm (det(reg I + φφᵀ) = reg^d (1 + |φ|²/reg))
    assert np.argmax((phi ** 2).sum(1)) in chosen
    # greedy is no worse than 200 random designs of the same size
    def logdet(s):
        return np.linalg.slogdet(phi[s].T @ phi[s] + 0.1 * np.eye(4))[1]
    assert logdet(chosen) >= max(logdet(rng.choice(200, 5, replace=False)) for _ in range(200))


def test_medoids_take_one_column_from_each_cluster():
    rng = np.random.default_rng(2)
    centres = np.array([[0, 0], [10, 0], [0, 10], [10, 10]], dtype=float)
    points = np.concatenate([c + rng.normal(scale=0.1, size=(50, 2)) for c in centres])
    chosen = medoids(np.c_[np.ones(200), points], 4, seed=0)
    assert sorted(chosen // 50) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="cannot choose 300 probes among 200 columns"):
        medoids(np.c_[np.ones(200), points], 300, seed=0)


def test_conformal_intervals_cover_a_low_rank_plus_noise_matrix_at_their_level():
    rng = np.random.default_rng(1)
    m, t, n = 60, 40, 2000
    z = (rng.normal(size=(m + t, 3)) @ (rng.normal(size=(3, n)) * rng.uniform(0.2, 1.5, n))
         + rng.normal(size=(m + t, n)) * 0.5).astype(np.float32)
    tasks = [f"t{i}" for i in range(m + t)]
    _, _, metrics, _ = run_split(z, tasks, tasks[:m], tasks[m:], "mf", {}, 30, list(range(5)), intervals=(0.8, 0.9))
    for level in (0.8, 0.9):
        covered = np.mean([s[f"coverage_{level:g}"] for s in metrics])
        assert abs(covered - level) < 0.02, (level, covered)
    assert np.mean([s["width_0.9"] for s in metrics]) > np.mean([s["width_0.8"] for s in metrics])


def test_the_fold_scale_and_quantile_are_exact():
    rows = np.random.default_rng(3).normal(size=(7, 5))
    scale = ColumnScale(rows)
    np.testing.assert_allclose(scale.all(), rows.std(0))
    np.testing.assert_allclose(scale.without(rows[2]), np.delete(rows, 2, 0).std(0))
    scores = np.arange(1, 10, dtype=np.float32)  # n = 9: level 0.8 takes the ceil(10 * 0.8) = 8th smallest
    assert quantile(scores, 0.8) == 8 and quantile(scores, 0.95) == np.inf


@pytest.mark.parametrize("method", ["mean", "additive", "knn", "mf"])
def test_a_fold_without_one_train_task_equals_a_refit_on_the_others(method):
    from forgetmap.predict.registry import make_method

    rng = np.random.default_rng(4)
    train = (rng.normal(size=(9, 2)) @ rng.normal(size=(2, 50)) + 0.1 * rng.normal(size=(9, 50))).astype(np.float32)
    params = {"mf": {"rank": 2, "reg": 0.1}, "knn": {"k": 3}}.get(method, {})
    fold = make_method(method, **params).fit(train).without(train, 4)
    refit = make_method(method, **params).fit(np.delete(train, 4, axis=0))
    known = np.array([[3, 17, 29, 41]])
    values = train[4:5, [3, 17, 29, 41]].astype(np.float64)
    np.testing.assert_allclose(fold.predict(known, values), refit.predict(known, values), atol=1e-4)


def test_intervals_are_left_out_for_ranking_scores_and_side_information():
    rng = np.random.default_rng(5)
    z = (rng.normal(size=(8, 2)) @ rng.normal(size=(2, 60))).astype(np.float32)
    tasks = [f"t{i}" for i in range(8)]
    for method, options in (("logistic_mf", {}), ("semantic", {"similarity": rng.uniform(size=z.shape)})):
        metrics = run_split(z, tasks, tasks[:5], tasks[5:], method, {}, 10, [0], intervals=(0.9,), **options)[2][0]
        assert not [m for m in metrics if m.startswith("coverage")], method
    metrics = run_split(z, tasks, tasks[:5], tasks[5:], "knn", {}, 10, [0], intervals=(0.9,))[2][0]
    assert 0 <= metrics["coverage_0.9"] <= 1
