"""Correlation analyses: statistics as scipy computes them, NaN-safe, and honest projections."""

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from forgetmap.correlate import category_summary, cosine_similarity, cross_task, pair_correlations
from forgetmap.data.chat import Encoded, encode_chat
from forgetmap.gradients import CountSketch, projected_gradients
from helpers import tiny_model, tiny_tokenizer


def test_pair_correlations_match_scipy_and_skip_nan_pairs():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, 50))
    s = z * 0.5 + rng.normal(size=(3, 50))
    z[1, 4] = np.nan
    table = pair_correlations(z, s, ["a", "b", "c"]).set_index("scope")
    keep = np.isfinite(z.ravel())
    assert table.loc["all", "pearson"] == pytest.approx(pearsonr(z.ravel()[keep], s.ravel()[keep])[0])
    assert table.loc["all", "spearman"] == pytest.approx(spearmanr(z.ravel()[keep], s.ravel()[keep])[0])
    assert table.loc["b", "n"] == 49 and table.loc["a", "n"] == 50


def test_constant_rows_have_no_correlation():
    z = np.vstack([np.ones(10), np.arange(10.0)])
    table = pair_correlations(z, np.vstack([np.arange(10.0)] * 2), ["flat", "ramp"]).set_index("scope")
    assert np.isnan(table.loc["flat", "pearson"]) and table.loc["ramp", "pearson"] == pytest.approx(1.0)


def test_cross_task_pairs_and_category_summary():
    rng = np.random.default_rng(1)
    shared = rng.normal(size=(2, 200))
    z = np.vstack([shared[0] + 0.1 * rng.normal(size=200) for _ in range(2)]
                  + [shared[1] + 0.1 * rng.normal(size=200) for _ in range(2)])
    pairs = cross_task(z, ["a1", "a2", "b1", "b2"], ["a", "a", "b", "b"])
    assert len(pairs) == 6
    summary = category_summary(pairs).set_index("pairs")
    assert summary.loc["within category", "pearson"] > 0.9 > summary.loc["across categories", "pearson"]
    # 4 tasks in 2 categories: 3 labelings, one of them the observed, so p = 1/3 at best
    assert summary.loc["within - across", "p_value"] == pytest.approx(1 / 3, abs=0.02)


def test_the_category_permutation_test_finds_structure_that_is_there_and_not_where_it_is_not():
    rng = np.random.default_rng(3)
    categories = [c for c in "abcd" for _ in range(4)]
    factors = rng.normal(size=(4, 300))
    structured = np.vstack([factors["abcd".index(c)] + rng.normal(size=300) for c in categories])
    noise = rng.normal(size=(16, 300))
    tasks = [f"t{k}" for k in range(16)]
    p_structured = category_summary(cross_task(structured, tasks, categories)).set_index("pairs")
    assert p_structured.loc["within - across", "p_value"] < 0.001
    assert p_structured.loc["within - across", "pearson_column_centred"] == pytest.approx(
        p_structured.loc["within category", "pearson_column_centred"]
        - p_structured.loc["across categories", "pearson_column_centred"])
    p_noise = [category_summary(cross_task(noise + rng.normal(size=(16, 300)), tasks, categories),
                               permutations=500, seed=s).set_index("pairs").loc["within - across", "p_value"]
               for s in range(40)]
    assert 0.2 < np.mean(p_noise) < 0.8  # uniform under the null: mean 1/2
    assert np.mean(np.array(p_noise) < 0.05) <= 0.15


def test_cosine_of_zero_vectors_is_zero():
    sim = cosine_similarity(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[2.0, 0.0], [0.0, 3.0]]))
    np.testing.assert_allclose(sim, [[1, 0], [0, 0]])


def test_projected_gradient_is_the_sketch_of_the_true_gradient():
    """Each parameter's gradient, projected and freed as the backward pass writes it, adds up to the dense
    sketch matrix times the whole gradient taken the plain way; and no gradient outlives the projection."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    [e] = encode_chat(tok, ["Compute 1 + 2."], ["1 + 2 = 3."], "olmo", 48)
    got = projected_gradients(model, [e], dim=32, seed=0)[0]
    assert all(p.grad is None for p in model.parameters())
    ids = torch.from_numpy(e.ids[None])
    logits = model(input_ids=ids).logits[0, e.target_start - 1:-1]
    torch.nn.functional.cross_entropy(logits, ids[0, e.target_start:]).backward()
    sketch = CountSketch(model, 32, seed=0)
    flat = torch.cat([p.grad.reshape(-1) for p in sketch.params]).double()
    dense = []  # the projection as a (dim, parameters) matrix of signs
    for k, p in enumerate(sketch.params):
        bucket, sign = sketch.hashes(k, 0, p.numel(), "cpu")
        columns = torch.zeros(32, p.numel(), dtype=torch.float64)
        columns[bucket, torch.arange(p.numel())] = sign
        dense.append(columns)
    np.testing.assert_allclose(got, (torch.cat(dense, dim=1) @ flat).numpy(), rtol=1e-5, atol=1e-7)


def test_the_sketch_hashes_spread_elements_over_buckets_and_signs_evenly():
    """Element i of a parameter, at any slice boundary, gets the same bucket and sign; over a million elements
    every bucket holds its share within 2 % and half the signs are negative."""
    from forgetmap import gradients

    sketch = CountSketch(torch.nn.Linear(1000, 1000, bias=False), 64, seed=3)
    bucket, sign = sketch.hashes(0, 0, 10**6, "cpu")
    again = torch.cat([sketch.hashes(0, a, min(a + 333_333, 10**6), "cpu")[0] for a in range(0, 10**6, 333_333)])
    assert torch.equal(bucket, again)
    counts = torch.bincount(bucket, minlength=64).double()
    assert (counts / counts.mean() - 1).abs().max() < 0.02
    assert abs((sign < 0).double().mean().item() - 0.5) < 0.002
    assert set(sign.unique().tolist()) == {-1.0, 1.0} and gradients.PRIME > 10**6


def test_kept_hashes_project_exactly_as_hashes_computed_for_each_example(monkeypatch):
    """A model's hashes are computed once and kept between examples, up to KEPT_BYTES of codes (hashing again
    took 60 % of the demo's gradient similarity, and 4-5 s of each example's 6-7 at 135M parameters on 2 cores):
    the projections are the same bits as without them, and only the parameters within the budget are kept."""
    from forgetmap import gradients

    tok = tiny_tokenizer()
    model = tiny_model(tok)
    examples = encode_chat(tok, ["Compute 1 + 2.", "Spell cat."], ["1 + 2 = 3.", "c-a-t"], "olmo", 48)
    assert CountSketch(model, 32).kept == set(range(len(CountSketch(model, 32).params)))  # all of a tiny model
    kept = projected_gradients(model, examples, dim=32, seed=0)
    sizes = [p.numel() for p in CountSketch(model, 32).params]
    monkeypatch.setattr(gradients, "KEPT_BYTES", 4 * (sizes[0] + sizes[1]))
    assert CountSketch(model, 32).kept == {0, 1}
    np.testing.assert_array_equal(kept, projected_gradients(model, examples, dim=32, seed=0))
    monkeypatch.setattr(gradients, "KEPT_BYTES", 0)
    assert CountSketch(model, 32).kept == set()
    np.testing.assert_array_equal(kept, projected_gradients(model, examples, dim=32, seed=0))


@pytest.mark.parametrize("architecture", ["demo", "gpt_neox", "olmo2"])
def test_examples_differentiated_together_project_as_one_at_a_time_and_a_tasks_mean_as_their_mean(architecture,
                                                                                                   monkeypatch):
    """Examples of unequal lengths, right-padded and differentiated in one batch (vmap of grad), get the projections
    the one-at-a-time path gives (float32 rounding); a task's mean projection, one backward of the mean loss, is the
    mean of its examples' (one without a target among them counting 0). On the demo's Llama-like model and on
    stand-ins of two other architectures."""
    from forgetmap import gradients
    from forgetmap.gradients import mean_projection

    if architecture == "demo":
        tok = tiny_tokenizer()
        model, template = tiny_model(tok), "olmo"
    else:
        from standins import build_model, train_tokenizer

        tok = train_tokenizer(architecture, None, 400)
        model, template = build_model(architecture, tok, seed=1).eval(), "auto"
    prompts = ["Compute 1 + 2.", "Spell cat.", "Name the capital of France, please, in one word.", "Sort b a c."]
    responses = ["1 + 2 = 3.", "c-a-t", "Paris", "a b c, in the order of the alphabet"]
    examples = encode_chat(tok, prompts, responses, template, 48)
    first = examples[0]
    examples.append(Encoded(first.ids[:first.target_start], first.target_start, first.target_start))
    assert len({len(e.ids) for e in examples}) == len(examples)  # every length its own: padded in the batch
    monkeypatch.setattr(gradients, "BATCH_TOKENS", 64)  # batches of 2 and 3 examples: padding within each
    together = projected_gradients(model, examples, dim=64, seed=1)
    mean = mean_projection(model, examples, dim=64, seed=1)
    assert all(p.grad is None for p in model.parameters())
    monkeypatch.setattr(gradients, "GRADIENT_BYTES", 0)  # one example at a time, as a large model's are
    alone = projected_gradients(model, examples, dim=64, seed=1)
    # a large model's mean: batches within the longest example's tokens (no per-example gradient to hold), or
    # within the job's max_length (the memory one example at max_length takes holds them)
    large_mean = mean_projection(model, examples, dim=64, seed=1)
    roomy_mean = mean_projection(model, examples, dim=64, seed=1, room=3 * max(len(e.ids) for e in examples))
    assert not alone[-1].any() and not together[-1].any()  # no target: no gradient
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-6 * np.abs(alone).max())
    for found in (mean, large_mean, roomy_mean):
        np.testing.assert_allclose(found, alone.mean(axis=0), rtol=1e-4, atol=1e-6 * np.abs(alone).max())


def test_count_sketch_preserves_inner_products_on_average():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=5000), rng.normal(size=5000)
    b += a  # correlated: <a, b> is large
    estimates = []
    for seed in range(20):
        g = np.random.default_rng(seed)
        bucket, sign = g.integers(0, 256, 5000), g.choice([-1.0, 1.0], 5000)
        pa, pb = np.bincount(bucket, a * sign, 256), np.bincount(bucket, b * sign, 256)
        estimates.append(pa @ pb)
    assert np.mean(estimates) == pytest.approx(a @ b, rel=0.1)


def test_minilm_embeddings_are_unit_vectors_that_know_meaning():
    from forgetmap.embed import embed

    v = embed(["a small cat", "a little kitten", "linear algebra exam"])
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5) and v.shape == (3, 384)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
