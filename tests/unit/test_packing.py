"""Padding-free packing: a packed example scores and trains as it does alone, in every architecture packing is
offered for, and is refused at planning for an architecture whose attention would let packed examples see
each other."""

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.data.chat import Encoded
from forgetmap.errors import ConfigError
from forgetmap.nll import TorchScorer
from forgetmap.data.packing import PACKABLE, Layout, packed_batches, rows_of
from test_real_models import data_dir  # noqa: F401 (a fixture)

VOCAB = 64


SHAPES = {  # the widths each architecture names its own way
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128},
    "gpt_bigcode": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128},
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128, "rotary_dim": 4},
    "codegen": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128, "n_ctx": 128, "rotary_dim": 4},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32},
}


def tiny(model_type: str, attention: str = "sdpa", seed: int = 0):
    """A 2-layer random-weight model of `model_type` (rotary or learned positions, grouped heads where it has them)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  **SHAPES.get(model_type, {}))
    config._attn_implementation = attention
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def examples(n: int, seed: int = 0, shortest: int = 2, longest: int = 40) -> list[Encoded]:
    """Examples of varied lengths, each scoring a tail of its own (a chat response) or all but its first token."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(shortest, longest))
        start = int(rng.integers(1, length))
        out.append(Encoded(rng.integers(3, VOCAB, length), start, length))
    return out


def test_rows_hold_every_example_once_within_the_width_and_the_budget():
    lengths = np.random.default_rng(1).integers(1, 60, 300)
    batches = packed_batches(lengths, token_budget=256)
    assert sorted(np.concatenate(batches).tolist()) == list(range(300))
    rows, width = 0, lengths.max()
    for batch in batches:
        laid = rows_of(lengths[batch], width)
        assert len(laid) * width <= 256 and all(lengths[batch][row].sum() <= width for row in laid)
        rows += len(laid)
    assert lengths.sum() / (rows * width) > 0.95  # short examples fill the tails of long ones: little padding


def test_a_layout_restarts_positions_at_every_example_and_at_the_padding():
    members = [Encoded(np.full(n, 5), 1, n) for n in (6, 4, 2, 3)]
    layout = Layout(members, pad_id=0)
    # at the longest's width: 6 fills row 0, 4 and 2 share row 1, 3 opens row 2 (padded)
    assert layout.ids.shape == (3, 6) and layout.row.tolist() == [0, 1, 1, 2] and layout.offset.tolist() == [0, 0, 4, 0]
    assert layout.position_ids[2].tolist() == [0, 1, 2, 0, 1, 2] and layout.ids[2, 3:].tolist() == [0, 0, 0]
    for member, row, column in zip(members, layout.row, layout.offset):
        n = len(member.ids)
        assert layout.position_ids[row, column:column + n].tolist() == list(range(n))


@pytest.mark.parametrize("model_type, attention", [*((t, "sdpa") for t in sorted(PACKABLE)),
                                                    ("llama", "eager"), ("gpt_neox", "eager"), ("gpt2", "eager")])
def test_a_packed_example_scores_as_it_does_alone(model_type, attention):
    model = tiny(model_type, attention)
    encoded = examples(48)
    alone = TorchScorer(model, 0, token_budget=256, max_padding=0.0)
    packed = TorchScorer(model, 0, token_budget=256, packing=True)
    width = max(len(e.ids) for e in encoded)
    layouts = [Layout([encoded[i] for i in batch], 0, width) for batch in packed.plan(encoded)]
    rows = sum(len(layout.ids) for layout in layouts)
    assert sum(len(e.ids) for e in encoded) / (rows * width) > 0.85  # rows of several examples, little padding
    nll, n_tokens = alone.score(encoded)
    packed_nll, packed_tokens = packed.score(encoded)
    assert np.array_equal(n_tokens, packed_tokens)
    np.testing.assert_allclose(packed_nll, nll, rtol=0, atol=1e-5)
    # and the greedy verdicts (each span, then the token after it, the argmax), which items' correctness reads
    _, _, greedy = alone.score_greedy(encoded)
    _, _, packed_greedy = packed.score_greedy(encoded)
    assert np.array_equal(greedy, packed_greedy)


def test_one_flat_row_scores_as_rows_do():
    """Flash-attention's layout (every example of a batch in one row, no padding), checked through sdpa here."""
    model = tiny("olmo2")
    encoded = examples(32)
    rows = TorchScorer(model, 0, token_budget=256, packing=True)
    flat = TorchScorer(model, 0, token_budget=256, packing=True)
    flat.flat = True  # what a flash-attention model sets
    batch = [encoded[i] for i in flat.plan(encoded)[0]]
    layout = Layout(batch, 0, flat=True)
    assert layout.ids.shape == (1, sum(len(e.ids) for e in batch))
    np.testing.assert_allclose(flat.score(encoded)[0], rows.score(encoded)[0], rtol=0, atol=1e-5)


def test_an_architecture_outside_the_list_lets_packed_examples_see_each_other():
    """OPT counts its learned positions from the attention mask: without one, a packed example's positions run on
    from the example before it (what the refusal at planning prevents)."""
    model = tiny("opt")
    encoded = examples(48)
    nll, _ = TorchScorer(model, 0, token_budget=256, max_padding=0.0).score(encoded)
    packed, _ = TorchScorer(model, 0, token_budget=256, packing=True).score(encoded)
    assert "opt" not in PACKABLE and np.abs(packed - nll).max() > 1e-3


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox"])
def test_a_packed_micro_batch_has_the_same_loss_and_gradients(model_type):
    from forgetmap.data.batches import collate
    from forgetmap.data.packing import model_inputs
    from forgetmap.train import batch_loss

    encoded = examples(12, seed=3)
    n_targets = sum(e.n_targets for e in encoded)
    results = []
    for packed in (False, True):
        model = tiny(model_type)
        batch = collate(encoded, 0, packed)
        loss = batch_loss(model(**model_inputs(batch)).logits, batch, n_targets)
        loss.backward()
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()], batch))
    (loss, grads, padded), (packed_loss, packed_grads, packed) = results
    assert packed["input_ids"].numel() < padded["input_ids"].numel() and packed["tokens"] == padded["tokens"]
    assert int((packed["labels"] != -100).sum()) == int((padded["labels"] != -100).sum()) == n_targets
    assert packed_loss == pytest.approx(loss, rel=1e-6)
    for a, b in zip(grads, packed_grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_a_packed_fine_tune_trains_as_the_padded_one():
    from forgetmap.data.batches import task_batches
    from forgetmap.train import train

    settings = {"lr": 1e-3, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": False,
                "gradient_checkpointing": False}
    encoded = examples(40, seed=4)
    losses = []
    for packed in (False, True):
        model = tiny("llama")
        summary = train(model, task_batches(encoded, 8, 2, 0), 4, {**settings, "packing": packed}, 0, None)
        losses.append(summary["final_loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


# --- at planning ---------------------------------------------------------------------------------------------------

def test_the_score_job_packs_and_writes_the_same_scores(tmp_path):
    from standins import save_standin
    from test_real_models import corpus_without_items, score_settings

    from forgetmap.score import score_shard

    model_dir = save_standin(tmp_path / "model", "olmo2")
    shard = tmp_path / "shard.parquet"
    corpus_without_items(40).to_parquet(shard)
    for packing in (False, True):
        score_shard(str(model_dir), str(shard), score_settings(max_length=64, packing=packing), 1,
                    str(tmp_path / f"{packing}.parquet"))
    plain, packed = pd.read_parquet(tmp_path / "False.parquet"), pd.read_parquet(tmp_path / "True.parquet")
    assert plain["n_tokens"].equals(packed["n_tokens"]) and plain["n_bytes"].equals(packed["n_bytes"])
    np.testing.assert_allclose(packed["nll"], plain["nll"], rtol=0, atol=1e-5)


def opt_base(directory):
    """A saved OPT model (not packable) with a stand-in's tokenizer."""
    from standins import train_tokenizer
    from transformers import OPTConfig, OPTForCausalLM

    tokenizer = train_tokenizer("gpt_neox")
    OPTForCausalLM(OPTConfig(vocab_size=len(tokenizer), hidden_size=32, ffn_dim=64, word_embed_proj_dim=32,
                             num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128,
                             eos_token_id=tokenizer.eos_token_id)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("stage", ["score", "finetune"])
def test_packing_an_architecture_that_cannot_keep_examples_apart_is_refused_naming_the_model(data_dir, stage):
    from test_real_models import plan_with, pretrained_config

    from forgetmap.config import preflight

    opt_base(data_dir / "model")
    plan = plan_with(pretrained_config(str(data_dir / "model"), **{stage: {"packing": True}}))
    with pytest.raises(ConfigError, match=rf"models\.m\.{stage}\.packing: .*model 'm' is of type 'opt'"):
        preflight.check(plan)


def test_packing_with_the_vllm_backend_is_refused(data_dir):
    from standins import save_standin
    from test_real_models import plan_with, pretrained_config

    from forgetmap.config import preflight

    save_standin(data_dir / "model", "llama")
    plan = plan_with(pretrained_config(str(data_dir / "model"), score={"backend": "vllm", "packing": True}))
    with pytest.raises(ConfigError, match=r"models\.m\.score\.packing: packing is the torch backend's"):
        preflight.check(plan)


def test_packing_a_packable_base_plans_and_sets_the_key_only_where_on(data_dir):
    from standins import save_standin
    from test_real_models import plan_with, pretrained_config

    from forgetmap.config import preflight

    save_standin(data_dir / "model", "gpt_neox")
    plan = plan_with(pretrained_config(str(data_dir / "model"), score={"packing": True}))
    preflight.check(plan)
    assert plan.score_settings("m")["packing"] is True
    assert "packing" not in plan.finetune_settings("m", "t1")  # off: settings of fine-tunes already made unchanged
