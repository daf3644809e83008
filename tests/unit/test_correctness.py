"""Sample-wise correctness: option scoring, free-form answers, transitions, chance-adjusted rates, Y's metrics."""

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.correctness.items import (Item, OptionScorer, choose, cut_at_stop, decide, encode_items, exact_match,
                                   loglik_naive, normalize_answer, option_scores)
from forgetmap.data.upstream import validate
from forgetmap.errors import DataError
from forgetmap.correctness.lowrank import fit_logistic, logistic_by_rank, point_biserial
from forgetmap.predict.metrics import evaluate_binary
from forgetmap.nll import TorchScorer
from forgetmap.correctness.transitions import backward_transfer_matrix, forgetting_matrix, rate_table, rates, transition_codes
from helpers import greedy_tokens, tiny_model, tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


def random_items(n: int, seed: int = 0) -> list[Item]:
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        k = int(rng.integers(2, 6))
        options = [rng.integers(3, 250, int(rng.integers(1, 5))) for _ in range(k)]
        items.append(Item(rng.integers(3, 250, int(rng.integers(2, 30))), options, [str(j) for j in range(k)],
                          int(rng.integers(k)), False))
    return items


def test_packed_option_scoring_matches_a_naive_per_option_loop(model):
    items = random_items(40)
    naive = loglik_naive(model, items)
    packed_scorer = OptionScorer(TorchScorer(model, 0, token_budget=200))
    packed = packed_scorer.loglik(items)
    separate = OptionScorer(TorchScorer(model, 0, token_budget=200), packed=False).loglik(items)
    assert packed_scorer.packed  # sdpa takes the block-causal mask: one sequence per item
    for a, b, c in zip(packed, separate, naive):
        np.testing.assert_allclose(a, c, atol=2e-4)
        np.testing.assert_allclose(b, c, atol=2e-4)


def test_a_flash_attention_model_scores_options_as_separate_sequences_without_trying_a_4d_mask(model, monkeypatch):
    items = random_items(6)
    model.config._attn_implementation = "flash_attention_2"  # as a GPU with flash-attn installed loads it
    try:
        scorer = OptionScorer(TorchScorer(model, 0, token_budget=200))
    finally:
        model.config._attn_implementation = "sdpa"  # this CPU cannot run the kernel: score with sdpa below
    assert scorer.packed is False  # decided before any forward pass: the packed check would crash under FA2

    def packed(*args):
        raise AssertionError("a 4D block-causal mask reached a flash-attention model")

    monkeypatch.setattr(scorer, "_packed_loglik", packed)
    for a, b in zip(scorer.loglik(items), loglik_naive(model, items)):
        np.testing.assert_allclose(a, b, atol=2e-4)


def test_acc_takes_the_summed_loglik_and_acc_norm_the_per_character_one_ties_to_the_first():
    loglik = np.array([-4.0, -3.0, -6.0])
    texts = ["ab", "a", "abcdef"]
    assert choose(option_scores(loglik, texts, "acc"), gold=1) == (1, True, 1.0)
    per_char = option_scores(loglik, texts, "acc_norm")  # -2, -3, -1
    predicted, right, margin = choose(per_char, gold=1)
    assert (predicted, right, margin) == (2, False, -2.0)
    assert choose(np.array([-1.0, -1.0]), gold=1)[:2] == (0, False)  # a tie goes to the first option
    assert choose(np.array([-1.0, -1.0]), gold=0)[:2] == (0, True)


def test_free_form_answers_are_normalised_and_cut_at_the_first_stop():
    assert normalize_answer("The  Red, fox!") == "red fox"
    assert exact_match("  the answer.", "Answer")
    assert not exact_match("answers", "answer")
    assert cut_at_stop("blue\n\nand more", ["\n\n"]) == "blue"


def test_batched_greedy_decoding_matches_one_context_at_a_time(model):
    contexts = [it.context for it in random_items(12, seed=1)]
    batched = greedy_tokens(model, contexts, pad_id=0, eos_id=2, max_new_tokens=6, token_budget=120)
    single = [greedy_tokens(model, [c], pad_id=0, eos_id=2, max_new_tokens=6, token_budget=120)[0] for c in contexts]
    reference = []
    for c in contexts:
        out = model.generate(torch.tensor(c[None]), max_new_tokens=6, do_sample=False, eos_token_id=2,
                             pad_token_id=0)[0, len(c):].numpy()
        reference.append(out[:np.flatnonzero(out == 2)[0]] if (out == 2).any() else out)
    for a, b, c in zip(batched, single, reference):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(b, c)


def test_items_are_encoded_from_their_prompt_with_each_option_as_the_continuation(tokenizer):
    frame = pd.DataFrame({
        "example_id": ["a", "b", "c", "d"], "source": ["q"] * 4, "kind": ["chat", "lm", "chat", "lm"],
        "text": [None, "Is it red? yes", None, "plain text"], "prompt": ["Where?", "Is it red?", "Colour?", None],
        "response": ["Mirbeck", None, "red", None],
        "choices": [["Ostvale", "Mirbeck", "Sunmere"], ["yes", "no"], None, None],
        "answer": ["Mirbeck", "yes", "red", None]})
    settings = {"target_delimiter": " ", "chat_template": "olmo", "max_length": 64, "max_new_tokens": 8}
    rows, items = encode_items(tokenizer, frame, settings)
    assert rows.tolist() == [0, 1, 2]
    assert [it.k for it in items] == [3, 2, 0] and items[0].gold == 1 and items[2].free_form
    assert tokenizer.decode(items[0].options[1]) == "Mirbeck"
    assert tokenizer.decode(items[0].context).endswith("<|assistant|>\n")
    assert tokenizer.decode(np.concatenate([items[1].context, items[1].options[0]])).endswith("Is it red? yes")
    record = decide(items, [np.array([-3.0, -1.0, -2.0]), np.array([-1.0, -5.0]), np.zeros(0)],
                    {2: "Red."}, "acc")
    assert record["predicted"].tolist() == ["Mirbeck", "yes", "Red."]
    assert record["correct"].tolist() == [1, 1, 1] and record["k"].tolist() == [3, 2, 0]
    assert record["margin"][0] == pytest.approx(1.0) and np.isnan(record["margin"][2])


@pytest.mark.parametrize("column, value, message", [
    ("answer", "Paris", "row 0, column 'answer': 'Paris' is not one of its choices"),
    ("choices", ["Rome"], "row 0, column 'choices': 1 option(s)"),
    ("choices", "Rome, Oslo", "row 0, column 'choices': str 'Rome, Oslo' is not a list"),
    ("answer", " ", "row 0, column 'answer': empty answer"),
    ("choices", ["Rome", "Oslo", "Rome"], "row 0, column 'choices': option 'Rome' is listed twice"),
])
def test_bad_items_are_refused_naming_the_row_and_column(column, value, message):
    frame = pd.DataFrame({"example_id": ["x"], "source": ["s"], "kind": ["chat"], "prompt": ["Capital?"],
                          "response": ["Rome"], "choices": [["Rome", "Oslo"]], "answer": ["Rome"]})
    frame.at[0, column] = value
    with pytest.raises(DataError, match=f"corpus.jsonl: {message}".replace("(", r"\(").replace(")", r"\)")):
        validate(frame, "corpus.jsonl")


def test_rates_match_a_hand_computed_case_with_k_2_k_4_and_free_form():
    # 4 items with k = 2, 4 with k = 4, 2 free form; before / after correctness
    k = np.array([2, 2, 2, 2, 4, 4, 4, 4, 0, 0])
    before = np.array([1, 1, 0, 0, 1, 1, 1, 0, 1, 0])
    after = np.array([1, 0, 1, 0, 0, 1, 1, 0, 0, 1])
    r = rates(before, after, k)
    assert (r["n00"], r["n01"], r["n10"], r["n11"]) == (2, 2, 3, 3)
    assert r["F"] == pytest.approx(0.3) and r["BT"] == pytest.approx(0.2)
    assert r["acc_after"] - r["acc_before"] == pytest.approx(r["BT"] - r["F"])
    # k = 2 group: acc_b = acc_a = 0.5 -> 0.25 / 1; k = 4: acc_b 0.75, acc_a 0.5 -> 0.125 / 3; free form: none
    spurious = 0.4 * 0.25 + 0.4 * (0.25 * 0.5 / 3)
    assert r["spurious"] == pytest.approx(spurious)
    assert r["F_true"] == pytest.approx(0.3 - spurious) and r["BT_true"] == pytest.approx(0.2 - spurious)
    assert r["relative_forgetting"] == pytest.approx(3 / 6)
    # ceilings: known shares (k acc - 1) / (k - 1): k=2 before 0, k=4 before 2/3, free form acc 0.5
    assert r["max_F"] == pytest.approx(0.4 * 0.0 + 0.4 * (2 / 3) + 0.2 * 0.5)
    assert r["max_BT"] == pytest.approx(0.4 * 0.0 + 0.4 * (1 / 3) + 0.2 * 0.5)


def test_a_base_that_gets_nothing_right_gives_an_empty_y_and_no_division_by_zero():
    before = np.zeros(4)
    after = np.array([[0, 1, 0, 0.0]])
    assert np.isnan(forgetting_matrix(before, after)).all()
    np.testing.assert_array_equal(backward_transfer_matrix(before, after), [[0, 1, 0, 0]])
    r = rates(before, after[0], np.full(4, 4))
    assert np.isnan(r["relative_forgetting"]) and r["F"] == 0 and r["F_true"] == 0


def test_transition_codes_y_and_y_bt_and_harmon_aggregation():
    before = np.array([1, 1, 0, 0.0])
    after = np.array([[0, 1, 1, 0], [1, 1, 0, 0.0], [0, 0, 0, 0.0]])
    np.testing.assert_array_equal(transition_codes(before, after)[0], [2, 3, 1, 0])
    y = forgetting_matrix(before, after)
    np.testing.assert_array_equal(y[:, :2], [[1, 0], [0, 0], [1, 1]]) and np.isnan(y[:, 2:]).all()
    table = rate_table(before, after, np.full(4, 2), np.array(["a", "a", "b", "b"]), ["t1", "t2", "t3"],
                       {"t1": "x", "t2": "x", "t3": "y"})
    tasks = table[table["level"] == "task"].set_index("task")
    assert tasks["F"].tolist() == [0.25, 0.0, 0.5]
    category = table[table["level"] == "category"].set_index("category")
    assert category.loc["x", "F"] == pytest.approx(0.125) and category.loc["y", "F"] == pytest.approx(0.5)
    overall = table[table["level"] == "overall"].iloc[0]
    assert overall["F"] == pytest.approx((0.125 + 0.5) / 2)  # unweighted over categories, not tasks
    source_b = table[(table["level"] == "source") & (table["task"] == "t1") & (table["source"] == "b")].iloc[0]
    assert source_b["N"] == 2 and source_b["BT"] == 0.5 and np.isnan(source_b["relative_forgetting"])


def test_binary_metrics_against_a_hand_computed_ranking():
    truth = np.array([[1, 0, 1, 0, 0.0]])
    pred = np.array([[0.9, 0.8, 0.7, 0.1, 0.1]])
    hidden = np.ones_like(truth, dtype=bool)
    out = evaluate_binary(pred, truth, hidden, decision=0.5, budget=2)
    assert out["auprc"] == pytest.approx(0.5 * 1.0 + 0.5 * (2 / 3))
    assert out["roc_auc"] == pytest.approx(5 / 6)
    assert out["best_f1"] == pytest.approx(0.8)          # the top 3: precision 2/3, recall 1
    assert out["f1_at_0.5"] == pytest.approx(0.8)        # 0.9, 0.8, 0.7 above 0.5
    assert out["precision_at_b"] == pytest.approx(0.5) and out["positive_rate"] == pytest.approx(0.4)


def test_logistic_mf_of_a_rank_one_binary_matrix_explains_more_deviance_by_rank():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(12, 1)), rng.normal(size=(1, 300))
    y = (rng.random((12, 300)) < 1 / (1 + np.exp(-4 * u @ v))).astype(float)
    table = logistic_by_rank(y, 2)
    assert table["deviance_explained"].is_monotonic_increasing
    assert table["deviance_explained"][1] > table["deviance_explained"][0] + 0.2
    assert table["f1"][1] > 0.7
    logits = fit_logistic(y, 1)
    assert logits.shape == y.shape


def test_point_biserial_is_pearson_over_observed_entries():
    z = np.array([[0.5, -0.1, 0.3, 9.0], [0.2, 0.0, -0.2, 9.0]])
    y = np.array([[1, 0, 1, np.nan], [1, 0, 0, np.nan]])
    table = point_biserial(z, y, ["a", "b"])
    expected = np.corrcoef(z[:, :3].ravel(), y[:, :3].ravel())[0, 1]
    assert table["r"][0] == pytest.approx(expected) and table["n"][0] == 6


def test_a_free_form_answer_that_the_nll_pass_found_greedy_is_not_decoded_again(model, tokenizer):
    from forgetmap.correctness.items import evaluate_torch, greedy_from_scores
    from forgetmap.data.chat import Encoded

    rng = np.random.default_rng(3)
    contexts = [rng.integers(3, 250, n) for n in (5, 9, 14, 7)]
    # the tiny model's greedy continuations stand in for answers, their 4th token for the EOS after them
    greedy = greedy_tokens(model, contexts, tokenizer.pad_token_id, None, 4)
    examples, items = [], []
    for c, g in zip(contexts, greedy):
        examples.append(Encoded(np.concatenate([c, g[:3], [g[3]]]), len(c), len(c) + 3))  # span = 3 greedy tokens
        items.append(Item(c, [], [tokenizer.decode(g[:3])], 0, True))
    wrong = examples[1].ids.copy()
    wrong[len(contexts[1]) + 1] = (wrong[len(contexts[1]) + 1] + 1) % 250  # a span token that is not the argmax
    examples[1] = Encoded(wrong, len(contexts[1]), len(contexts[1]) + 3)
    scorer = TorchScorer(model, tokenizer.pad_token_id, 4096)
    nll, n_tokens, is_greedy = scorer.score_greedy(examples)
    assert is_greedy.tolist() == [True, False, True, True]
    np.testing.assert_array_equal(nll, scorer.score(examples)[0])  # the flag changes no NLL, bit for bit
    # the token after the span must be EOS for greedy decoding to stop there: here it is g[3]
    known = greedy_from_scores(items, examples, is_greedy, eos_id=int(greedy[0][3]), limits=np.full(4, 8))
    assert list(known) == [0] and known[0].tolist() == greedy[0][:3].tolist()
    assert greedy_from_scores(items, examples, is_greedy, int(greedy[0][3]), limits=np.full(4, 3)) == {}  # over the cap
    settings = {"max_new_tokens": 3, "token_budget": 4096, "stop": [], "metric": "acc"}
    decoded = evaluate_torch(model, tokenizer, items, settings, scorer)
    shortcut = evaluate_torch(model, tokenizer, items, settings, scorer, known)
    pd.testing.assert_frame_equal(decoded, shortcut)
    assert shortcut["correct"].tolist()[0] == 1


def test_the_packing_check_tolerance_follows_the_options_length_not_the_contexts():
    """A long context once widened the tolerance to tens of nats in bf16: a packing that got an option's
    sum wrong by 2 nats passed. The bound is per option token."""
    from forgetmap.correctness.items import packing_agrees

    item = Item(np.arange(2000), [np.array([5]), np.array([6, 7, 8])], ["a", "b"], 0, False)
    separate = np.array([-3.0, -9.0])
    assert packing_agrees(separate + [0.04, -0.1], separate, item, torch.bfloat16)  # within 0.05 per token
    assert not packing_agrees(separate + [2.0, 0.0], separate, item, torch.bfloat16)  # a 2,000-token context
    assert not packing_agrees(separate + [0.0, 0.05], separate, item, torch.float32)
    assert packing_agrees(separate + [0.0, 0.002], separate, item, torch.float32)


def test_harmon_aggregates_sources_within_benchmark_categories_then_over_categories():
    """Harmon et al.: rates per sub-benchmark, the mean within a benchmark category, then over categories;
    post-training types average their rows' overall."""
    rng = np.random.default_rng(0)
    sources = np.repeat(["mmlu_algebra", "mmlu_physics", "gsm8k"], 40)
    before = rng.integers(0, 2, size=120).astype(float)
    after = rng.integers(0, 2, size=(2, 120)).astype(float)
    table = rate_table(before, after, np.full(120, 4), sources, ["sft", "dpo"], {"sft": "sft", "dpo": "pref"},
                       {"stem": ["mmlu_*"]})
    source = table[table["level"] == "source"].set_index(["task", "source"])["F_true"]
    bench = table[table["level"] == "benchmark_category"].set_index(["task", "source"])["F_true"]
    assert bench["sft", "stem"] == pytest.approx((source["sft", "mmlu_algebra"] + source["sft", "mmlu_physics"]) / 2)
    assert bench["sft", "gsm8k"] == pytest.approx(source["sft", "gsm8k"])  # unlisted: a category of its own
    overall = table[table["level"] == "benchmark_overall"].set_index("task")["F_true"]
    assert overall["sft"] == pytest.approx((bench["sft", "stem"] + bench["sft", "gsm8k"]) / 2)
    by_type = table[table["level"] == "type_overall"].set_index("category")["F_true"]
    assert by_type["pref"] == pytest.approx(overall["dpo"])
