"""Forgetting prediction: methods recover low-rank rows, the protocol hides what it reveals."""

import numpy as np
import pytest

from forgetmap.errors import DataError
from forgetmap.predict import make_method
from forgetmap.predict.metrics import evaluate, roc_auc
from forgetmap.predict.protocol import known_columns, run_split


def low_rank(m=30, n=400, rank=2, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, rank)) @ rng.normal(size=(rank, n)) + 0.2 + noise * rng.normal(size=(m, n))


def fold(method, z, k=30, **params):
    train, test = z[:-5], z[-5:]
    model = make_method(method, **params).fit(train)
    known = np.broadcast_to(known_columns(z.shape[1], k, 0), (5, k))
    pred = model.predict(known, np.take_along_axis(test, known, axis=1))
    hidden = np.ones_like(test, dtype=bool)
    np.put_along_axis(hidden, known, False, axis=1)
    return np.sqrt(((pred - test)[hidden] ** 2).mean())


def test_methods_rank_as_expected_on_a_low_rank_matrix():
    z = low_rank()
    rmse = {m: fold(m, z) for m in ("mean", "additive", "knn", "mf")}
    assert rmse["mf"] < 0.05 < rmse["knn"] < rmse["mean"]
    assert rmse["additive"] < 1.1 * rmse["mean"]  # an offset from 30 entries: little to gain here


def test_mf_folds_in_an_exact_low_rank_row_exactly():
    z = low_rank(noise=0.0)
    assert fold("mf", z, rank=2, reg=1e-9) < 1e-6


def test_mf_chooses_rank_by_validation():
    model = make_method("mf").fit(low_rank(rank=3, noise=0.01)[:-5])
    assert model.rank_ == 3


def test_mf_validation_error_is_the_squared_error_of_the_predicted_hidden_entries():
    train = low_rank(m=25, n=300, rank=3, noise=0.1).astype(np.float32)
    mf = make_method("mf")
    errors, rows, known = mf.validation_errors(train, mf._gram(train))
    for (rank, reg), error in [((1, 0.01), errors[(1, 0.01)]), ((3, 1.0), errors[(3, 1.0)])]:
        direct = 0.0
        for held in np.array_split(np.arange(len(rows)), 5):
            rest = np.setdiff1d(np.arange(len(train)), rows[held])
            centred = train[rest].astype(np.float64) - train[rest].mean(0)
            _, s, vt = np.linalg.svd(centred, full_matrices=False)
            model = make_method("mf", rank=rank, reg=reg).fit(train[rest])
            np.testing.assert_allclose(np.abs(model.factors_), np.abs(vt[:rank].T * s[:rank] / np.sqrt(len(rest))),
                                       atol=1e-4)
            truth = train[rows[held]]
            pred = model.predict(known[held], np.take_along_axis(truth, known[held], axis=1))
            hidden = np.ones(truth.shape, dtype=bool)
            np.put_along_axis(hidden, known[held], False, axis=1)
            direct += float(((pred.astype(np.float64) - truth) ** 2)[hidden].sum())
        assert error == pytest.approx(direct, rel=1e-4)


def test_additive_matches_the_closed_form_on_complete_data():
    z = low_rank()
    model = make_method("additive", reg=0.0).fit(z)
    fitted = model.baseline(model.task_offset_)
    expected = z.mean(1, keepdims=True) + z.mean(0, keepdims=True) - z.mean()
    np.testing.assert_allclose(fitted, expected, atol=1e-8)


@pytest.mark.parametrize("method", ["logistic_mf", "implicit_als"])
@pytest.mark.parametrize("fit_columns", [1000, 150])  # all examples / fitted on a sample, the rest folded in
def test_binary_methods_rank_forgotten_examples_above_chance(method, fit_columns):
    z = low_rank(m=30, n=400, rank=2, noise=0.3)
    preds, _, metrics, _ = run_split(z, [f"t{i}" for i in range(30)], [f"t{i}" for i in range(25)],
                                     [f"t{i}" for i in range(25, 30)], method, {"fit_columns": fit_columns},
                                     k=30, seeds=[0, 1])
    random = run_split(z, [f"t{i}" for i in range(30)], [f"t{i}" for i in range(25)],
                       [f"t{i}" for i in range(25, 30)], "random", {}, k=30, seeds=[0, 1])[2]
    assert np.mean([m["roc_auc"] for m in metrics]) > 0.7 > np.mean([m["roc_auc"] for m in random]) + 0.15
    assert np.isnan(metrics[0]["rmse"])  # a binary method has no RMSE


def test_roc_auc_matches_pairwise_counting():
    rng = np.random.default_rng(0)
    labels, scores = rng.random(200) > 0.6, rng.normal(size=200).round(1)
    pos, neg = scores[labels], scores[~labels]
    expected = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    assert roc_auc(labels, scores) == pytest.approx(expected)


def test_metrics_match_a_direct_computation():
    rng = np.random.default_rng(3)
    truth = rng.normal(0.3, 1.0, size=(4, 500)).astype(np.float32)
    pred = (truth + rng.normal(size=truth.shape)).astype(np.float32)
    hidden = rng.random(truth.shape) > 0.1
    hidden[:, :10] = True
    out = evaluate(pred, truth, hidden, q=0.2, budget=25)
    p, t = pred[hidden], truth[hidden]
    assert out["rmse"] == pytest.approx(np.sqrt(np.mean((p.astype(np.float64) - t) ** 2)))
    tp = ((p > 0) & (t > 0)).sum()
    assert out["precision"] == pytest.approx(tp / (p > 0).sum()) and out["recall"] == pytest.approx(tp / (t > 0).sum())
    assert out["roc_auc"] == pytest.approx(roc_auc(t > 0, p))
    count = round(0.2 * hidden.sum(1).min())
    hits = chosen_true = 0
    for row in range(4):
        order_p = np.argsort(-pred[row][hidden[row]])
        order_t = np.argsort(-truth[row][hidden[row]])
        hits += len(np.intersect1d(order_p[:count], order_t[:count]))
        chosen_true += (truth[row][hidden[row]][order_p[:25]] > 0).sum()
    assert out["top_q_f1"] == pytest.approx(hits / (4 * count))
    assert out["precision_at_b"] == pytest.approx(chosen_true / (4 * 25))


def test_a_constant_prediction_selects_exactly_the_budget():
    truth = np.tile(np.array([1.0, -1.0, 1.0, 1.0, -1.0, 1.0], dtype=np.float32), (2, 1))
    hidden = np.ones_like(truth, dtype=bool)
    hidden[1, 0] = False
    out = evaluate(np.ones_like(truth), truth, hidden, q=0.5, budget=2)
    # ties go to the lower index: row 0 takes examples 0, 1 (one forgotten), row 1 takes 1, 2 (one)
    assert out["precision_at_b"] == pytest.approx(0.5)
    assert out["roc_auc"] == 0.5


def test_metrics_of_a_perfect_prediction():
    truth = np.array([[1.0, -1.0, 2.0, -0.5], [0.5, 0.2, -0.1, 3.0]])
    hidden = np.ones_like(truth, dtype=bool)
    out = evaluate(truth, truth, hidden, q=0.5, budget=2)
    assert out["rmse"] == 0 and out["f1"] == 1 and out["roc_auc"] == 1 and out["top_q_f1"] == 1
    assert out["precision_at_b"] == 1.0


def test_protocol_never_scores_revealed_or_nan_examples():
    z = low_rank(m=12, n=100).astype(np.float32)
    z[:, 7] = np.nan
    tasks = [f"t{i}" for i in range(12)]
    preds, known, metrics, _ = run_split(z, tasks, tasks[:9], tasks[9:], "mf", {}, k=10, seeds=[0, 1])
    assert preds.shape == (2, 3, 100) and np.isnan(preds[:, :, 7]).all()
    assert known.shape == (2, 10) and 7 not in known and len(set(known[0])) == 10
    assert not np.array_equal(known[0], known[1]) and metrics[0]["rmse"] < 0.2


@pytest.mark.parametrize("train, test, k, message", [
    (["t0"], ["t0", "t1"], 5, "both train and test"),
    ([], ["t1"], 5, "non-empty"),
    (["t0"], ["zz"], 5, "not in the forgetting matrix"),
    (["t0"], ["t1"], 100, "k = 100 known columns leaves nothing"),
])
def test_bad_splits_are_clear_errors(train, test, k, message):
    z = low_rank(m=3, n=100)
    with pytest.raises(DataError, match=message):
        run_split(z, ["t0", "t1", "t2"], train, test, "mean", {}, k=k, seeds=[0])


def test_reference_surprise_methods_run_as_the_reference_does():
    pytest.importorskip("surprise")
    z = low_rank(m=10, n=40, noise=0.05)
    tasks = [f"t{i}" for i in range(10)]
    ours = run_split(z, tasks, tasks[:8], tasks[8:], "additive", {}, k=10, seeds=[0])[2][0]["rmse"]
    for method in ("surprise_additive", "surprise_svd"):
        preds, _, metrics, _ = run_split(z, tasks, tasks[:8], tasks[8:], method, {}, k=10, seeds=[0])
        assert np.isfinite(preds).all() and metrics[0]["rmse"] < 2 * ours + 0.1


def test_semantic_method_learns_the_slope_on_train_tasks_and_the_offset_from_known_entries():
    rng = np.random.default_rng(4)
    sim = rng.random(size=(8, 200))
    z = 0.3 + 2.0 * sim + 0.01 * rng.normal(size=(8, 200)) + np.arange(8)[:, None] * 0.1
    tasks = [f"t{i}" for i in range(8)]
    preds, _, metrics, model = run_split(z, tasks, tasks[:6], tasks[6:], "semantic", {}, k=20, seeds=[0],
                                         similarity=sim)
    assert model.slope_ == pytest.approx(2.0, abs=0.02) and metrics[0]["rmse"] < 0.03
    with pytest.raises(ValueError, match="similarity rows"):
        run_split(z, tasks, tasks[:6], tasks[6:], "semantic", {}, k=20, seeds=[0])


def test_a_constant_matrix_is_predicted_as_the_constant_by_every_method():
    z = np.full((12, 200), 0.3, dtype=np.float32)
    tasks = [f"t{i}" for i in range(12)]
    for method in ("mean", "additive", "knn", "mf", "logistic_mf", "implicit_als", "all_forgotten", "random"):
        preds, _, metrics, _ = run_split(z, tasks, tasks[:8], tasks[8:], method, {}, k=10, seeds=[0])
        assert np.isfinite(preds).all(), method
        if method in ("mean", "additive", "knn", "mf"):
            np.testing.assert_allclose(preds, 0.3, atol=1e-5, err_msg=method)
        assert np.isnan(metrics[0]["roc_auc"])  # one class only: undefined, not a number made up


@pytest.mark.parametrize("method", ["logistic_mf", "implicit_als", "mf", "knn"])
def test_a_single_train_task_is_enough(method):
    z = low_rank(m=4, n=120, noise=0.3)
    preds, _, metrics, _ = run_split(z, ["a", "b", "c", "d"], ["a"], ["c", "d"], method, {}, k=10, seeds=[0])
    assert preds.shape == (1, 2, 120) and np.isfinite(preds).all()
