"""Replay selection and the paired statistics that judge mitigation arms."""

import numpy as np
import pytest

from forgetmap.errors import DataError
from forgetmap.mitigation.replay import (heldout_examples, mixture_batches, replay_count, replay_steps,
                                         sampling_weights, select_replay)
from forgetmap.stats import bootstrap_interval, hodges_lehmann, paired_test, rank_biserial, wilcoxon


def test_the_heldout_set_is_seeded_sorted_and_sized_by_count_or_share():
    a, b = heldout_examples(1000, 100, seed=0), heldout_examples(1000, 100, seed=0)
    assert np.array_equal(a, b) and len(a) == 100 and np.all(np.diff(a) > 0)
    assert len(heldout_examples(1000, 0.25, seed=0)) == 250
    assert not np.array_equal(a, heldout_examples(1000, 100, seed=1))
    with pytest.raises(DataError, match="needs 0 < size < 1000"):
        heldout_examples(1000, 1000, seed=0)


def test_weights_are_a_softmax_at_temperature_and_nan_weighs_nothing():
    w = sampling_weights(np.array([0.0, 0.1, np.nan]), 0.1)
    assert w[2] == 0 and w.sum() == pytest.approx(1) and w[1] / w[0] == pytest.approx(np.e)


def test_replay_never_draws_a_heldout_example_and_never_repeats():
    n = 5000
    heldout = heldout_examples(n, 500, seed=0)
    pool = np.setdiff1d(np.arange(n), heldout)
    scores = np.random.default_rng(1).normal(size=len(pool))
    for seed in range(5):
        for kwargs in ({}, {"scores": scores}, {"scores": scores, "mode": "max"}):
            chosen = select_replay(200, pool, seed, **kwargs)
            assert len(np.unique(chosen)) == 200 and not np.isin(chosen, heldout).any()


def test_sampling_prefers_high_scores_and_max_takes_the_top():
    pool = np.arange(1000)
    scores = np.linspace(0, 1, 1000)
    drawn = select_replay(50, pool, 0, scores, temperature=0.1)
    assert drawn.mean() > 800  # weights e^(10 s): the top tenth holds most of the mass
    assert sorted(select_replay(10, pool, 0, scores, mode="max")) == list(range(990, 1000))
    assert np.array_equal(select_replay(50, pool, 3, scores), select_replay(50, pool, 3, scores))


def test_an_exhausted_pool_is_an_error_not_a_draw_with_replacement():
    pool = np.arange(10)
    scores = np.array([1.0] * 4 + [np.nan] * 6)
    with pytest.raises(DataError, match="replay pool is exhausted: 5 examples to replay, 4 candidates"):
        select_replay(5, pool, 0, scores)
    with pytest.raises(DataError, match="exhausted: 11 examples"):
        select_replay(11, pool, 0)


def test_replay_budget_follows_the_reference():
    assert replay_count(1000, 1 / 32) == 32 and replay_count(18, 1 / 32) == 1
    assert replay_steps(1000, 1 / 32) == 1031


def test_the_mixture_draws_task_and_replay_in_proportion():
    batches = mixture_batches(list(range(320)), [-1] * 10, batch_size=33, micro_batches=1, seed=0)
    drawn = [x for _ in range(100) for x in next(batches)[0]]
    assert np.mean(np.array(drawn) == -1) == pytest.approx(10 / 330, abs=0.005)


def test_hodges_lehmann_and_rank_biserial_on_known_values():
    assert hodges_lehmann(np.array([1.0, 2.0, 3.0])) == 2.0
    assert hodges_lehmann(np.array([-1.0, 5.0])) == 2.0  # Walsh averages -1, 2, 5
    assert rank_biserial(np.array([1.0, 2.0, 3.0])) == 1.0
    assert rank_biserial(np.array([1.0, -2.0])) == pytest.approx((1 - 2) / 3)


def test_wilcoxon_matches_the_exact_signed_rank_distribution():
    statistic, p = wilcoxon(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
    assert statistic == 0 and p == pytest.approx(2 / 64)  # all six positive: the smallest two-sided p
    assert np.isnan(wilcoxon(np.zeros(4))[1])


def test_the_bootstrap_interval_resamples_tasks_and_covers_the_estimate():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(10), 2)
    d = rng.normal(0.5, 0.2, size=20)
    low, high = bootstrap_interval(d, groups)
    assert low < hodges_lehmann(d) < high and low > 0
    identical = bootstrap_interval(np.full(6, 0.3), np.repeat(np.arange(3), 2))
    assert identical == pytest.approx((0.3, 0.3))


def test_paired_test_reports_every_figure_and_drops_nan_pairs():
    x = np.array([1.0, 2.0, 3.0, np.nan])
    y = np.array([0.5, 1.0, 1.0, 1.0])
    out = paired_test(x, y, np.array(["a", "a", "b", "b"]))
    assert out["n"] == 3 and out["n_tasks"] == 2 and out["rank_biserial"] == 1.0
    assert out["hodges_lehmann"] == pytest.approx(hodges_lehmann(np.array([0.5, 1.0, 2.0])))


# --- token masks and example weights ------------------------------------------------------------------

from forgetmap.data.chat import Encoded  # noqa: E402
from forgetmap.mitigation.tokens import flow_weights, random_masks, stm_masks, weighted  # noqa: E402


def encoded_examples():
    rng = np.random.default_rng(0)
    examples = [Encoded(rng.integers(0, 50, 12), 4, 11), Encoded(rng.integers(0, 50, 9), 3, 8)]
    losses = [np.linspace(0.1, 2.0, 8).astype(np.float32), np.array([0.5, 3.0, 0.2, 1.5, 0.1, 2.5], np.float32)]
    return examples, losses


def test_stm_masks_the_high_loss_tokens_by_absolute_perplexity_or_quantile():
    examples, losses = encoded_examples()
    masked, share = stm_masks(examples, losses, "abs", tau=2.5)
    flat = np.concatenate(losses)
    assert share == pytest.approx(np.mean(np.exp(flat) > 2.5))
    for e, m, nll in zip(examples, masked, losses):
        assert np.array_equal(m.loss_mask[e.target_start:], np.exp(nll) <= 2.5)
        assert m.loss_mask[:e.target_start].all() and m.n_targets == int((np.exp(nll) <= 2.5).sum())
    masked, share = stm_masks(examples, losses, "quantile", q=0.2)
    assert share == 3 / 14  # round(0.2 x 14) tokens: the three highest losses (3.0, 2.5, 2.0)
    assert [np.flatnonzero(~m.loss_mask[e.target_start:]).tolist() for e, m in zip(examples, masked)] == [[7], [1, 5]]
    assert all(m.weight == 1.0 for m in masked)


def test_the_random_control_masks_as_many_tokens_per_example_elsewhere():
    examples, losses = encoded_examples()
    stm, share = stm_masks(examples, losses, "quantile", q=0.3)
    control, control_share = random_masks(examples, stm, seed=0)
    assert control_share == share
    assert [c.n_targets for c in control] == [s.n_targets for s in stm]
    assert any(not np.array_equal(c.loss_mask, s.loss_mask) for c, s in zip(control, stm))


def test_flow_weights_favour_low_loss_examples_with_mean_one():
    w = flow_weights(np.array([0.5, 1.0, 2.0, 4.0]))
    assert w.mean() == pytest.approx(1.0) and np.all(np.diff(w) < 0)
    assert w[0] / w[1] == pytest.approx(np.exp(0.5 / 1.5))  # τ = the median loss, 1.5
    assert [e.weight for e in weighted(encoded_examples()[0], np.array([0.5, 1.5]))] == [0.5, 1.5]


def test_an_arm_without_replay_tokens_or_weights_is_plain_finetuning():
    from forgetmap.data.batches import task_batches
    from forgetmap.mitigation.arms import arm_batches

    examples, _ = encoded_examples()
    settings = {"batch_size": 2, "grad_accum": 1, "processes": 1, "seed": 3, "steps": 4, "max_epochs": None,
                "chat_template": "olmo", "max_length": 32, "arm": {"name": "none", "replay": "none",
                                                                      "tokens": "none", "weights": "none"}}
    batches, steps, summary = arm_batches(settings, None, examples, 1)
    plain = task_batches(examples, 2, 1, 3)
    assert steps == 4 and summary == {}
    for _ in range(5):
        assert [[id(e) for e in mb] for mb in next(batches)] == [[id(e) for e in mb] for mb in next(plain)]


def test_rows_are_read_from_the_shards_that_hold_them_in_the_order_asked(tmp_path):
    import pandas as pd

    from forgetmap.data.upstream import read_ids, read_rows

    paths = []
    for k in range(3):
        frame = pd.DataFrame({"example_id": [f"e{k * 4 + i}" for i in range(4)], "source": "s", "kind": "lm",
                              "text": [f"text {k * 4 + i}" for i in range(4)]})
        paths.append(str(tmp_path / f"shard-{k}.parquet"))
        frame.to_parquet(paths[-1])
    assert read_ids(paths).tolist() == [f"e{i}" for i in range(12)]
    rows = read_rows(paths, np.array([9, 2, 10, 0]))
    assert rows["example_id"].tolist() == ["e9", "e2", "e10", "e0"] and rows["text"].tolist()[0] == "text 9"


def _matrix(values, ids, statistic):
    from forgetmap.matrix import ForgettingMatrix

    n = len(ids)
    return ForgettingMatrix(np.asarray(values, dtype=np.float32), ["t"], np.array(ids), np.array(["s"] * n),
                            np.zeros(n, dtype=np.float32), {"t": "c"}, {"c": "in_domain"}, statistic)


def test_replay_by_p_1to0_scores_only_base_correct_items_and_never_draws_the_rest(tmp_path):
    import pandas as pd

    from forgetmap.mitigation.replay import replay_scores

    ids = np.array([f"e{i}" for i in range(6)])
    # Y over the items e1..e4: NaN where the base was wrong (e2); e0 and e5 carry no answer at all
    _matrix([[1, np.nan, 0, 1]], ids[1:5], "forgotten_1to0").write(tmp_path / "y.parquet")
    scores = replay_scores("ground_truth", "t", ids, None, str(tmp_path / "y.parquet"), statistic="forgotten_1to0")
    np.testing.assert_array_equal(scores, [np.nan, 1, np.nan, 0, 1, np.nan])
    chosen = select_replay(2, np.arange(6), seed=0, scores=scores, temperature=0.1)
    assert set(chosen) <= {1, 3, 4}
    with pytest.raises(DataError, match="non-zero weight"):  # three candidates, never the examples without Y
        select_replay(4, np.arange(6), seed=0, scores=scores)
    # the predicted P(Y = 1) as the binary protocol writes it: only the items, NaN where the base was wrong
    (tmp_path / "pred").mkdir()
    pd.DataFrame({"example_id": ids[1:5], "t": [0.9, np.nan, 0.2, 0.6]}).to_parquet(tmp_path / "pred/seed-0.parquet")
    predicted = replay_scores("predicted", "t", ids, str(tmp_path / "pred"), None, statistic="forgotten_1to0")
    np.testing.assert_allclose(predicted, [np.nan, 0.9, np.nan, 0.2, 0.6, np.nan])
    # the loss statistic needs every example scored
    with pytest.raises(DataError, match="no score for upstream example 'e0'"):
        replay_scores("predicted", "t", ids, str(tmp_path / "pred"), None)


def test_heldout_rates_count_1to0_and_0to1_against_the_base_with_the_margin_filter(tmp_path):
    import pandas as pd

    from forgetmap.mitigation.summary import transitions_of

    before = pd.Series([1.0, 1.0, 0.0, 0.0, 1.0], index=[f"e{i}" for i in range(5)])
    arm = pd.DataFrame({"example_id": ["e0", "e1", "e2", "e3", "e4", "x"],  # x: no answer
                        "correct": pd.array([0, 1, 1, 0, 1, None], dtype="Int8"),
                        "margin": [-1.0, 2.0, 0.1, -0.5, 0.2, np.nan], "k": [2, 4, 2, 3, 4, 0]})
    # e0 1->0, e1 1->1, e2 0->1, e3 0->0, e4 1->1: F = 1/5, BT = 1/5
    assert transitions_of(arm, before, None) == {
        "heldout_items": 5, "heldout_F": 0.2, "heldout_BT": 0.2, "heldout_n10": 1, "heldout_n01": 1}
    # a margin of 0.5 nats: e2 and e4 win by less, so e2 stays 0 and e4 becomes 1->0
    assert transitions_of(arm, before, 0.5) == {
        "heldout_items": 5, "heldout_F": 0.4, "heldout_BT": 0.0, "heldout_n10": 2, "heldout_n01": 0}


def test_risk_aware_replay_adds_beta_times_the_interval_half_width(tmp_path):
    import pandas as pd

    from forgetmap.mitigation.replay import replay_scores

    ids = np.array(["e0", "e1", "e2"])
    (tmp_path / "pred").mkdir()
    pd.DataFrame({"example_id": ids, "t": [0.1, 0.2, 0.3]}).to_parquet(tmp_path / "pred/seed-0.parquet")
    pd.DataFrame({"example_id": ids[::-1], "halfwidth_0.9": [1.0, 0.0, 2.0]}).to_parquet(
        tmp_path / "pred/intervals-0.parquet")  # in another order: matched by example id
    scores = replay_scores("predicted", "t", ids, str(tmp_path / "pred"), None, risk=0.5, risk_level=0.9)
    np.testing.assert_allclose(scores, [0.1 + 1.0, 0.2, 0.3 + 0.5])
    np.testing.assert_allclose(replay_scores("predicted", "t", ids, str(tmp_path / "pred"), None), [0.1, 0.2, 0.3])
    (tmp_path / "pred/intervals-0.parquet").unlink()
    with pytest.raises(DataError, match="no conformal intervals beside the prediction"):
        replay_scores("predicted", "t", ids, str(tmp_path / "pred"), None, risk=0.5, risk_level=0.9)


def test_equal_differences_of_counted_rates_tie_in_the_signed_rank_test():
    from forgetmap.stats import paired_test, rate_differences

    # held-out F over the same 97 items: arm and baseline differ by one item in four pairs, by two in one
    n = np.full(5, 97)
    arm, base = np.array([10, 31, 7, 55, 12]), np.array([9, 30, 6, 54, 14])
    exact = rate_differences(arm, n, base, n)
    assert len(set(exact[:4])) == 1  # four equal differences, one float: they tie
    floats = arm / 97 - base / 97
    assert len(set(floats[:4])) > 1  # subtracted as floats, the last digits break the tie
    tied = paired_test(arm / 97, base / 97, np.arange(5), d=exact)
    from scipy.stats import wilcoxon

    assert tied["wilcoxon_statistic"] == wilcoxon([1, 1, 1, 1, -2]).statistic
    assert tied["rank_biserial"] == pytest.approx((4 * 2.5 - 5) / 15)


def test_random_replay_draws_independently_for_every_task():
    from forgetmap.mitigation.replay import draw_seed

    pool = np.arange(1000)
    a = select_replay(20, pool, draw_seed(0, "task_a", uniform=True))
    b = select_replay(20, pool, draw_seed(0, "task_b", uniform=True))
    assert not np.array_equal(a, b)
    assert np.array_equal(a, select_replay(20, pool, draw_seed(0, "task_a", uniform=True)))  # still seeded
    assert draw_seed(3, "task_a", uniform=False) == 3  # weighted draws keep their seed


def test_an_arms_run_gives_back_its_training_memory_before_it_is_judged(monkeypatch):
    """The judging may start a vLLM engine in the same process, which refuses to start while the fine-tune's
    model sits in reference cycles and torch's cache: both are released first (a CUDA device is stood in
    for by recording what the cache was asked)."""
    import gc
    import weakref

    import torch

    from forgetmap import arm, train
    from forgetmap.mitigation import evaluate

    events, alive = [], {}

    class Trained(torch.nn.Module):  # a module in a reference cycle, as a model with hooks is
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(4))
            self.cycle = [self]

    def fake_finetune(*args, **kwargs):
        model = Trained()
        alive["model"] = weakref.ref(model)
        return {"steps": 1}

    def fake_evaluate(*args):
        events.append(("judged", alive["model"]() is None))
        return {"validation_nll": 1.0}

    gc.disable()  # only release_memory's collection may free the cycle
    try:
        monkeypatch.setattr(train, "finetune", fake_finetune)
        monkeypatch.setattr(evaluate, "judge", fake_evaluate)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append(("empty_cache", None)))
        arm.arm_command("base", "task", {}, {}, "heldout", 1, "out", "scores", "summary")
    finally:
        gc.enable()
    assert events == [("empty_cache", None), ("judged", True)]
