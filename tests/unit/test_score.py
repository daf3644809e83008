"""Scoring: the batched torch backend equals a naive per-example loop; vLLM outputs parse the same."""

from types import SimpleNamespace

import numpy as np
import pytest

from forgetmap.data import demo
from forgetmap.data.chat import Encoded, encode_examples
from forgetmap.data.batches import length_batches
from forgetmap.nll import TorchScorer, nll_from_prompt_logprobs, score_naive
from helpers import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def setup():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    frame = demo.upstream_corpus(48, 1234)
    return tok, model, encode_examples(tok, frame, "olmo", 64)


@pytest.mark.parametrize("max_padding", [0.0, 0.5])
def test_batched_scores_match_the_naive_loop(setup, max_padding):
    tok, model, encoded = setup
    nll, n_tokens = TorchScorer(model, tok.pad_token_id, token_budget=256, max_padding=max_padding).score(encoded)
    reference = score_naive(model, encoded)
    assert np.abs(nll - reference).max() < 1e-5
    assert n_tokens.tolist() == [e.n_scored for e in encoded]
    assert nll.dtype == np.float32 and n_tokens.dtype == np.int32


def test_logits_path_gives_the_same_scores(setup):
    tok, model, encoded = setup
    scorer = TorchScorer(model, tok.pad_token_id, token_budget=256)
    scorer.use_hidden = False
    assert np.abs(scorer.score(encoded)[0] - score_naive(model, encoded)).max() < 1e-5


def test_small_head_chunks_give_the_same_scores(setup, monkeypatch):
    import forgetmap.nll as score

    tok, model, encoded = setup
    expected = TorchScorer(model, tok.pad_token_id).score(encoded)[0]
    monkeypatch.setattr(score, "HEAD_CHUNK_ELEMENTS", 7 * len(tok))
    assert np.abs(TorchScorer(model, tok.pad_token_id).score(encoded)[0] - expected).max() < 1e-6


def test_empty_span_is_nan(setup):
    tok, model, _ = setup
    empty = Encoded(np.array([5, 6, 7]), 3, 3)
    nll, n_tokens = TorchScorer(model, tok.pad_token_id).score([empty])
    assert np.isnan(nll[0]) and n_tokens[0] == 0


def test_batches_respect_the_token_budget_and_the_padding_bound():
    lengths = np.random.default_rng(0).integers(2, 60, 500)
    batches = length_batches(lengths, 400, max_padding=0.1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    for b in batches:
        width = lengths[b].max() * len(b)
        assert len(b) == 1 or (width <= 400 and 1 - lengths[b].sum() / width <= 0.1)
    assert lengths[batches[0]].max() == lengths.max()  # longest first: memory errors show at once
    assert [len(b) for b in length_batches(np.array([7, 7, 7, 7]), 100)] == [4]


def test_vllm_prompt_logprobs_parse_to_the_mean_span_nll():
    ids = [11, 12, 13, 14]
    # the structure vLLM returns: None for position 0, then {token_id: Logprob(logprob=..., rank=...)}
    recorded = [None,
                {12: SimpleNamespace(logprob=-0.5, rank=1, decoded_token="b")},
                {13: SimpleNamespace(logprob=-1.5, rank=3, decoded_token="c"),
                 99: SimpleNamespace(logprob=-0.1, rank=1, decoded_token="z")},
                {14: SimpleNamespace(logprob=-2.0, rank=2, decoded_token="d")}]
    assert nll_from_prompt_logprobs(ids, recorded, 1, 4) == pytest.approx((0.5 + 1.5 + 2.0) / 3)
    assert nll_from_prompt_logprobs(ids, recorded, 2, 3) == pytest.approx(1.5)
    assert np.isnan(nll_from_prompt_logprobs(ids, recorded, 3, 3))


def test_vllm_flat_prompt_logprobs_parse_as_the_list_form_does():
    ids = [11, 12, 13, 14]
    # FlatLogprobs' columns: position 0 has no entries; position 2 lists a top candidate before the prompt token
    flat = SimpleNamespace(start_indices=[0, 0, 1, 3], end_indices=[0, 1, 3, 4], token_ids=[12, 99, 13, 14],
                           logprobs=[-0.5, -0.1, -1.5, -2.0])
    assert nll_from_prompt_logprobs(ids, flat, 1, 4) == pytest.approx((0.5 + 1.5 + 2.0) / 3)
    assert nll_from_prompt_logprobs(ids, flat, 2, 3) == pytest.approx(1.5)
    assert np.isnan(nll_from_prompt_logprobs(ids, flat, 3, 3))


def test_vllm_lengths_fit_a_2048_position_model():
    from forgetmap.engine import vllm_lengths

    # documents cut to max_length 2048 on a 2048-position model: 2048 + 1 would be refused, and so would a
    # 2048-token prompt at 2048 (prompt and one output token must fit): prompts of 2047 tokens fit
    assert vllm_lengths([2048, 100], 2048) == (2048, 2047)
    assert vllm_lengths([2000, 100], 2048) == (2001, 2000)  # the paper's Pile documents: nothing is cut
    assert vllm_lengths([50], None) == (51, 50)


def test_model_positions_follow_pointers_to_the_base_files(tmp_path):
    import json

    from forgetmap.models import write_pointer
    from forgetmap.nll import model_positions

    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    write_pointer(tmp_path / "base", "org/model", local=str(tmp_path / "real"))
    (tmp_path / "neox").mkdir()
    (tmp_path / "neox" / "config.json").write_text(json.dumps({"n_positions": 1024}))
    assert model_positions(str(tmp_path / "base")) == 2048 and model_positions(str(tmp_path / "neox")) == 1024


def test_an_example_with_nothing_to_score_never_reaches_vllm_and_is_nan():
    """vLLM refuses an empty prompt where torch gives NaN: an empty `lm` text is not sent (a stand-in engine
    that refuses empty prompts as vLLM does records what it was sent)."""
    from forgetmap.nll import score_prompts

    class Engine:
        def __init__(self):
            self.sent = []

        def generate(self, prompts, params):
            assert all(p["prompt_token_ids"] for p in prompts), "The decoder prompt cannot be empty"
            self.sent += [p["prompt_token_ids"] for p in prompts]
            return [SimpleNamespace(prompt_logprobs=[None] + [{t: SimpleNamespace(logprob=-1.0)} for t in p["prompt_token_ids"][1:]])
                    for p in prompts]

    engine = Engine()
    encoded = [Encoded(np.array([], dtype=np.int64), 1, 0), Encoded(np.array([5, 6, 7]), 1, 3),
               Encoded(np.array([4]), 1, 1)]
    nll = score_prompts(engine, encoded, dict, None)
    assert engine.sent == [[5, 6, 7]] and np.isnan(nll[0]) and nll[1] == 1.0 and np.isnan(nll[2])
    assert np.isnan(score_prompts(Engine(), encoded[:1], dict, None)).all()


def test_the_vllm_engine_takes_the_configured_score_dtype():
    from forgetmap.engine import engine_options, vllm_dtype

    assert vllm_dtype("auto") == "bfloat16" and vllm_dtype("float32") == "float32"
    assert vllm_dtype("float16") == "float16" and vllm_dtype("auto", cpu=True) == "float32"
    settings = {"dtype": "auto", "gpu_memory_utilization": 0.85}
    gpu = engine_options(settings, seeded=True, cpu=False, gpus=2)
    assert gpu["tensor_parallel_size"] == 2 and "enable_chunked_prefill" not in gpu and gpu["dtype"] == "bfloat16"
    cpu = engine_options(settings, seeded=True, cpu=True, gpus=0)
    assert cpu["enable_chunked_prefill"] is False and cpu["tensor_parallel_size"] == 1 and cpu["dtype"] == "float32"
    assert "enable_chunked_prefill" not in engine_options(settings, seeded=False, cpu=True, gpus=0)


def test_a_vllm_memory_share_that_is_not_free_is_refused_naming_the_key():
    """vLLM V1 refuses to start unless its share of the whole GPU is free; the job says so first, with the
    share that is free, before any result is written."""
    from forgetmap.errors import ForgetmapError
    from forgetmap.engine import free_share

    gib = 2**30
    free_share(0.85, [(70 * gib, 80 * gib)])  # 0.875 free: starts
    with pytest.raises(ForgetmapError, match=r"config key score.gpu_memory_utilization: 0.85 of GPU 1's 80.0 GiB is "
                                          r"asked of vLLM and 60.0 GiB \(0.75\) is free .*lower it to 0.75 or less"):
        free_share(0.85, [(70 * gib, 80 * gib), (60 * gib, 80 * gib)])


def test_an_engine_that_dies_at_work_ends_the_job_naming_the_checkpoint_and_other_errors_pass_through():
    """vLLM raises EngineDeadError in the job's process when its core or a worker died (the cause is in the
    engine's log above); forgetmap's own errors and any other exception are not rewritten."""
    from forgetmap.engine import check_heads, engine_failures
    from forgetmap.errors import ForgetmapError

    class EngineDeadError(Exception):  # vLLM's class, known by its name
        pass

    with pytest.raises(ForgetmapError, match=r"^ck/a: vLLM's engine stopped while it worked; .* in the log above"):
        with engine_failures("ck/a"):
            raise EngineDeadError("EngineCore encountered an issue.")
    with pytest.raises(KeyError):
        with engine_failures("ck/a"):
            raise KeyError("x")
    check_heads(64, [32, 64], "ck/a")
    with pytest.raises(ForgetmapError, match=r"ck/a: the model's attention heads have 16 dimensions .* computes 32, 64:"):
        check_heads(16, [32, 64], "ck/a")
