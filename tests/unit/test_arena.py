"""The mitigation arena's training changes and judging: each method changes what it claims, and only that."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.config.schema import ARM, SCORE, with_defaults
from forgetmap.data import demo
from forgetmap.data.batches import task_batches
from forgetmap.data.chat import encode_chat
from forgetmap.mitigation.anchors import KLToBase, L2SP
from forgetmap.mitigation.ema import EMA
from forgetmap.mitigation.freezing import Freeze, blocks
from forgetmap.mitigation.hooks import Hooks
from forgetmap.mitigation.knobs import arm_hooks, fine_tunes
from forgetmap.train import finetune, train
from helpers import half_only_attention, tiny_model, tiny_tokenizer

SETTINGS = {"method": "full", "steps": 4, "batch_size": 4, "grad_accum": 1, "lr": 3e-3, "warmup_steps": 1,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "max_epochs": None, "max_length": 48, "seed": 0,
            "gradient_checkpointing": False, "bf16": True, "processes": 1, "device": "cpu", "attention": "sdpa",
            "chat_template": "olmo", "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def examples(tok):
    frame = demo.task_examples("city_qa", 16, 1234, 0.0)
    return encode_chat(tok, frame["prompt"].tolist(), frame["response"].tolist(), "olmo", 48)


def trained(tok, examples, hooks=None, model=None, tmp=None):
    model = model if model is not None else tiny_model(tok)
    summary = train(model, task_batches(examples, 4, 1, 0), SETTINGS["steps"], SETTINGS, tok.pad_token_id, None,
                    hooks=hooks)
    return model, summary


def test_freezing_the_lower_blocks_keeps_them_and_the_embeddings_bit_identical(tok, examples):
    base = tiny_model(tok)
    model, summary = trained(tok, examples, Hooks([Freeze(top=1)]))
    lower, top = blocks(base)[0], blocks(model)[-1]
    for (name, p), q in zip(blocks(model)[0].named_parameters(), lower.parameters()):
        assert torch.equal(p, q), name
    assert torch.equal(model.get_input_embeddings().weight, base.get_input_embeddings().weight)
    assert any(not torch.equal(p, q) for p, q in zip(top.parameters(), blocks(base)[-1].parameters()))
    assert summary["trained_parameters"] == sum(p.numel() for p in top.parameters())


def test_named_modules_train_alone_and_an_unknown_name_says_what_there_is(tok, examples):
    base = tiny_model(tok)
    model, _ = trained(tok, examples, Hooks([Freeze(modules=["mlp"])]))
    for (name, p), q in zip(model.named_parameters(), base.parameters()):
        assert torch.equal(p, q) == (".mlp." not in name), name
    with pytest.raises(ValueError, match="train_modules feed_forward: no such module.*mlp"):
        Freeze(modules=["feed_forward"]).start(tiny_model(tok))
    with pytest.raises(ValueError, match="train_top 3: the model has 2 transformer blocks"):
        Freeze(top=3).start(tiny_model(tok))


def test_the_kl_term_is_zero_before_the_first_step_and_grows_with_training(tok, examples):
    from forgetmap.data.batches import collate

    model = tiny_model(tok)
    hook = KLToBase(1.0)
    hook.start(model)
    batch = collate(examples[:4], tok.pad_token_id)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert float(hook.micro_loss(model, batch, logits, 10).detach()) == 0.0
    assert hook.extra_forward_tokens == int(batch["attention_mask"].sum())
    _, summary = trained(tok, examples, Hooks([KLToBase(1.0)]), model=model)
    assert summary["kl_base_training"] > 0
    assert summary["forward_tokens"] == 2 * summary["backward_tokens"]  # the reference's forward passes


def test_the_kl_anchor_keeps_the_fine_tune_closer_to_the_base_and_lora_needs_no_copy(tok, examples):
    from forgetmap.mitigation.signals import task_signals
    from forgetmap.train import attach_lora

    base = tiny_model(tok)
    plain, _ = trained(tok, examples)
    anchored, _ = trained(tok, examples, Hooks([KLToBase(50.0)]))
    kl = [task_signals(m, base, examples, tok.pad_token_id)["kl_base"] for m in (plain, anchored)]
    assert kl[1] < kl[0]
    lora = attach_lora(tiny_model(tok), SETTINGS["lora"], 0)
    hook = KLToBase(1.0)
    hook.start(lora)
    assert hook.reference is None  # the adapter switched off is the base


def test_l2_sp_adds_lambda_times_the_distance_to_the_initial_weights_to_the_gradient(tok, examples):
    model = tiny_model(tok)
    hook = L2SP(0.5)
    hook.start(model)
    p, p0 = hook.anchor[0]
    with torch.no_grad():
        p.add_(1.0)
    p.grad = torch.zeros_like(p)
    hook.before_step(model)
    assert torch.allclose(p.grad, torch.full_like(p, 0.5))
    base = tiny_model(tok)
    plain, _ = trained(tok, examples)
    anchored, summary = trained(tok, examples, Hooks([L2SP(100.0)]))
    with torch.no_grad():
        distance = [sum(float(((a - b) ** 2).sum()) for a, b in zip(m.parameters(), base.parameters())) ** 0.5
                    for m in (plain, anchored)]
    assert distance[1] < distance[0]
    assert summary["l2_sp_distance"] == pytest.approx(distance[1], rel=1e-4)


def test_ema_with_decay_one_returns_the_base_and_with_decay_zero_the_fine_tune(tok, examples):
    base = tiny_model(tok)
    kept, summary = trained(tok, examples, Hooks([EMA(1.0)]))
    assert all(torch.equal(p, q) for p, q in zip(kept.parameters(), base.parameters()))
    assert summary["ema_base_weight"] == 1.0
    plain, _ = trained(tok, examples)
    fast, _ = trained(tok, examples, Hooks([EMA(0.0)]))
    assert all(torch.equal(p, q) for p, q in zip(fast.parameters(), plain.parameters()))
    slow, _ = trained(tok, examples, Hooks([EMA(0.5)]))
    assert not all(torch.equal(p, q) for p, q in zip(slow.parameters(), plain.parameters()))


def test_a_swept_knob_expands_into_one_fine_tune_per_value_and_lora_becomes_the_method():
    arm = with_defaults(ARM, {"lora": {"r": [2, 8]}, "kl_base": 0.1})
    runs = fine_tunes({**SETTINGS, "arm": arm})
    assert [(knob, value) for knob, value, _ in runs] == [("lora.r", 2.0), ("lora.r", 8.0)]
    assert all(s["method"] == "lora" and s["lora"]["target_modules"] == ["q_proj", "v_proj"] for *_, s in runs)
    assert [s["lora"]["r"] for *_, s in runs] == [2, 8]
    assert [type(h).__name__ for h in arm_hooks(runs[0][2]).hooks] == ["KLToBase"]
    rates = fine_tunes({**SETTINGS, "arm": with_defaults(ARM, {"lr": [1e-4, 1e-3], "ema": 0.9})})
    assert [(knob, s["lr"], s["arm"]["ema"]) for knob, _, s in rates] == [("lr", 1e-4, 0.9), ("lr", 1e-3, 0.9)]
    [(knob, value, plain)] = fine_tunes({**SETTINGS, "arm": with_defaults(ARM, {})})
    assert knob is None and np.isnan(value) and plain["method"] == "full" and not arm_hooks(plain)


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory, tok):
    """A base, an arm's fine-tune of it judged at alpha 0, 0.5 and 1, and the base and fine-tune scored alone."""
    from forgetmap.arm import arm_command
    from forgetmap.score import score_shard

    root = tmp_path_factory.mktemp("judged")
    tiny_model(tok).save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    task = root / "city_qa.parquet"
    demo.task_examples("city_qa", 24, 1234, 0.25).to_parquet(task)
    heldout = root / "heldout.parquet"
    demo.upstream_corpus(40, 1234).to_parquet(heldout)
    score = {**with_defaults(SCORE, {"max_length": 48, "token_budget": 2048, "device": "cpu"}), "chat_template": "olmo"}
    arm = {"name": "x", **with_defaults(ARM, {"l2_sp": [0.1, 10.0]})}
    models_alive = []  # torch models alive as each variant's held-out scoring starts (a vLLM engine would)

    def held_out(*args, **kwargs):
        import gc

        from transformers import PreTrainedModel

        gc.collect()
        models_alive.append(sum(issubclass(type(o), PreTrainedModel) for o in gc.get_objects()))
        return score_shard(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("forgetmap.score.score_shard", held_out)
        summary = arm_command(str(root / "base"), str(task), {**SETTINGS, "arm": arm}, score, str(heldout), 1,
                              str(root / "ck"), str(root / "scores.parquet"), str(root / "scores.json"),
                              alphas=[0.0, 0.5])
    summary["models_alive"] = models_alive
    alone = {name: score_shard(str(root / path), str(heldout), score, 1, str(root / f"{name}.parquet"))
             for name, path in (("base", "base"), ("tuned", "ck/l2_sp-0.1"))}
    return root, summary, alone


def test_alpha_zero_reproduces_the_bases_scores_and_alpha_one_the_fine_tunes_exactly(judged_run):
    root, summary, _ = judged_run
    scores = pd.read_parquet(root / "scores.parquet")
    base, tuned = pd.read_parquet(root / "base.parquet"), pd.read_parquet(root / "tuned.parquet")
    first = scores[scores["value"] == 0.1]
    for alpha, alone in ((0.0, base), (1.0, tuned)):
        rows = first[first["alpha"] == alpha].reset_index(drop=True)
        assert rows["example_id"].tolist() == alone["example_id"].tolist()
        np.testing.assert_array_equal(rows["nll"].to_numpy(), alone["nll"].to_numpy())
        if "correct" in alone:
            assert rows["correct"].equals(alone["correct"])
    middle = first[first["alpha"] == 0.5]["nll"].to_numpy()
    assert not np.array_equal(middle, base["nll"].to_numpy()) and not np.array_equal(middle, tuned["nll"].to_numpy())


def test_a_sweep_is_judged_per_value_and_alpha_with_signals_and_costs(judged_run):
    root, summary, _ = judged_run
    facts = json.loads((root / "scores.json").read_text())
    assert [(v["value"], v["alpha"]) for v in facts["variants"]] == [
        (0.1, 1.0), (0.1, 0.5), (0.1, 0.0), (10.0, 1.0), (10.0, 0.5), (10.0, 0.0)]
    at_zero = [v for v in facts["variants"] if v["alpha"] == 0.0]
    assert all(v["kl_base"] == 0.0 and v["weight_distance"] == 0.0 and v["loss_drop"] == 0.0 for v in at_zero)
    by = {(v["value"], v["alpha"]): v for v in facts["variants"]}
    assert by[(0.1, 0.5)]["weight_distance"] == pytest.approx(by[(0.1, 1.0)]["weight_distance"] / 2, rel=1e-4)
    assert by[(10.0, 1.0)]["weight_distance"] < by[(0.1, 1.0)]["weight_distance"]  # the stronger anchor
    assert [t["value"] for t in facts["fine_tunes"]] == [0.1, 10.0]
    assert all(t["forward_tokens"] == t["backward_tokens"] == t["tokens"] > 0 and t["peak_memory_mb"] > 0
               for t in facts["fine_tunes"])
    assert sorted(p.name for p in (root / "ck").iterdir()) == ["l2_sp-0.1", "l2_sp-10"]
    assert not list(root.glob(".variants.*"))  # the interpolated checkpoints are gone


def test_the_held_out_scoring_starts_with_no_torch_model_on_the_device(judged_run):
    """Every variant's learning is measured beside the base first; the base is let go before any held-out
    scoring starts, so a vLLM engine (which claims its share of the whole GPU) never starts beside it."""
    _, summary, _ = judged_run
    assert summary["models_alive"] == [0] * 6


def test_a_lora_adapter_scaled_by_zero_merges_into_the_base_exactly(tmp_path, tok):
    from forgetmap.mitigation.interpolation import interpolate
    from forgetmap.models import load_model

    base = tmp_path / "base"
    tiny_model(tok).save_pretrained(base)
    tok.save_pretrained(base)
    task = tmp_path / "t.parquet"
    demo.task_examples("city_qa", 24, 1234, 0.25).to_parquet(task)
    finetune(str(base), str(task), {**SETTINGS, "method": "lora"}, 1, str(tmp_path / "lora"))
    cpu = torch.device("cpu")
    reference = dict(load_model(base, cpu, torch.float32).named_parameters())
    for alpha, same in ((0.0, True), (1.0, False)):
        merged = load_model(interpolate(str(base), str(tmp_path / "lora"), alpha, tmp_path / f"a{alpha}"), cpu,
                            torch.float32)
        equal = all(torch.equal(p, reference[n]) for n, p in merged.named_parameters())
        assert equal == same
    with pytest.raises(ValueError, match="outside"):
        interpolate(str(base), str(tmp_path / "lora"), 1.5, tmp_path / "bad")


def test_self_generated_replay_keeps_prompts_and_prefixes_and_writes_the_rest(tok):
    from forgetmap.mitigation.self_generated import self_generated

    upstream = demo.upstream_corpus(40, 1234)
    frame = pd.concat([upstream[upstream["kind"] == "chat"].head(3), upstream[upstream["kind"] == "lm"].head(3)])
    arm = with_defaults(ARM, {"replay": "self_generated", "generation": {"max_new_tokens": 6, "prefix_tokens": 3}})
    model = tiny_model(tok)
    out, generated = self_generated(model, tok, frame, arm, SETTINGS)
    again, _ = self_generated(model, tok, frame, arm, SETTINGS)
    assert out.equals(again) and 0 < generated <= 6 * 6  # seeded by the fine-tune's seed
    chat, lm = out[out["kind"] == "chat"], out[out["kind"] == "lm"]
    assert chat["prompt"].tolist() == frame[frame["kind"] == "chat"]["prompt"].tolist()
    assert chat["response"].tolist() != frame[frame["kind"] == "chat"]["response"].tolist()
    for text, original in zip(lm["text"], frame[frame["kind"] == "lm"]["text"]):
        prefix = tok.decode(tok(original, add_special_tokens=False)["input_ids"][:3])
        assert text.startswith(prefix) and text != original
    arm["generation"]["prompts"] = "none"
    blank, _ = self_generated(model, tok, frame, arm, SETTINGS)
    assert (blank["kind"] == "lm").all() and blank["example_id"].tolist() == frame["example_id"].tolist()


def test_sdft_keeps_a_rewrite_only_where_it_still_carries_the_answer(monkeypatch, tok):
    from forgetmap.mitigation import sdft

    assert sdft.carries_answer("So the total is 48.", "41 plus 7 is 48.")
    assert not sdft.carries_answer("The total is 47.", "41 plus 7 is 48.")
    assert sdft.carries_answer("I think it's paris", "Paris.") and not sdft.carries_answer("Lyon", "Paris")
    frame = pd.DataFrame({"prompt": ["What is 41 plus 7?", "Capital of France?"], "response": ["48", "Paris"]})
    shown = []

    def rewrites(model, tokenizer, contexts, *args):
        shown.extend(tokenizer.decode(c) for c in contexts)
        return ["It is 48.", "Lyon, I believe"], 9

    monkeypatch.setattr(sdft, "continuations", rewrites)
    generation = with_defaults(ARM, {"targets": "sdft"})["generation"]
    out, facts = sdft.distilled(tiny_model(tok), tok, frame, generation, SETTINGS)
    assert out["response"].tolist() == ["It is 48.", "Paris"]
    assert facts == {"sdft_kept": 0.5, "generated_tokens": 9}
    assert "### Reference Answer:\n48" in shown[0] and "<|assistant|>" in shown[0]  # the whole rewrite prompt


def test_the_base_writes_its_own_text_in_trainings_precision(monkeypatch, tok):
    """Self-generated replay and SDFT generate with the model about to be trained (fp32 weights) before
    training's autocast starts; with flash-attention, picked for bf16 training on a GPU, that generation
    crashed as the head check once did. An attention function that refuses fp32 as flash-attn does stands
    in for its kernel, CPU autocast for CUDA's."""
    from contextlib import nullcontext

    from transformers import LlamaConfig, LlamaForCausalLM

    import forgetmap.models
    from forgetmap.mitigation import sdft
    from forgetmap.mitigation.self_generated import self_generated

    half_only_attention("half_only_arena")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="half_only_arena")  # fp32 weights
    upstream = demo.upstream_corpus(40, 1234)
    frame = upstream[upstream["kind"] == "chat"].head(2)
    arm = with_defaults(ARM, {"replay": "self_generated", "generation": {"max_new_tokens": 4}})
    task = pd.DataFrame({"prompt": ["What is 41 plus 7?"], "response": ["48"]})
    with pytest.raises(RuntimeError, match="fp16 and bf16"):  # outside autocast (CPU: no autocast)
        self_generated(model, tok, frame, arm, SETTINGS)
    monkeypatch.setattr(forgetmap.models, "autocast_for", lambda device, bf16=True: (
        torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext()))  # as on a bf16 GPU
    out, generated = self_generated(model, tok, frame, arm, SETTINGS)
    assert generated > 0 and len(out) == 2
    _, facts = sdft.distilled(model, tok, task, arm["generation"], SETTINGS)
    assert facts["generated_tokens"] > 0
    with pytest.raises(RuntimeError, match="fp16 and bf16"):  # bf16 off: generation in fp32, as training
        self_generated(model, tok, frame, arm, {**SETTINGS, "bf16": False})


def test_protection_aimed_where_the_prediction_points_shows_in_rho_and_the_top_tenths_share():
    from forgetmap.mitigation.fronts import at_learning, pareto
    from forgetmap.mitigation.protection import protection_row

    rng = np.random.default_rng(0)
    predicted = rng.normal(size=200)
    aimed = np.where(predicted >= np.quantile(predicted, 0.9), 1.0, 0.0) + rng.normal(0, 0.01, 200)
    blind = rng.normal(0.1, 0.05, 200)
    row = protection_row(aimed, predicted)
    assert row["top_share"] > 0.9 and row["protection_top"] > row["protection_rest"]
    unaimed = protection_row(blind, predicted)
    assert 0.0 < unaimed["top_share"] < 0.25 and row["spearman"] > abs(unaimed["spearman"]) + 0.1
    assert np.isnan(protection_row(np.zeros(200), predicted)["spearman"])  # nothing protected: undefined
    # the front: (learning, forgetting) pairs, lower is better on both; read between its points only
    learning, forgetting = np.array([1.0, 2.0, 3.0, 2.5]), np.array([0.3, 0.1, 0.0, 0.2])
    assert pareto(learning, forgetting).tolist() == [True, True, True, False]
    assert at_learning(learning, forgetting, 1.5) == pytest.approx(0.2)
    assert np.isnan(at_learning(learning, forgetting, 0.5)) and np.isnan(at_learning(learning, forgetting, 3.5))


@pytest.mark.parametrize("architecture, targets", [("gpt_neox", ["query_key_value"]), ("olmo2", ["q_proj", "v_proj"])])
def test_the_arenas_changes_hold_on_other_architectures_and_plain_text(tmp_path, architecture, targets):
    """A GPT-NeoX (no pad token) and an OLMo-2 stand-in, trained on plain-text and chat examples that are not
    the demo's: the lower block and embeddings stay bit-identical under freezing, the KL term starts at
    zero, and a LoRA adapter on the architecture's own projections scaled by 0 merges into the base exactly."""
    from standins import build_model, sentences, train_tokenizer

    from forgetmap.data.batches import collate
    from forgetmap.data.chat import encode_lm
    from forgetmap.mitigation.interpolation import interpolate
    from forgetmap.models import load_model

    tok = train_tokenizer(architecture)
    texts = sentences(24, seed=3)
    examples = encode_lm(tok, texts[:12], 48) + encode_chat(tok, texts[12:18], texts[18:], "olmo", 48)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    base, model = build_model(architecture, tok), build_model(architecture, tok)
    kl = KLToBase(1.0)
    train(model, task_batches(examples, 4, 1, 0), 3, SETTINGS, pad, None, hooks=Hooks([Freeze(top=1), kl, EMA(0.5)]))
    assert all(torch.equal(p, q) for p, q in zip(blocks(model)[0].parameters(), blocks(base)[0].parameters()))
    assert torch.equal(model.get_input_embeddings().weight, base.get_input_embeddings().weight)
    assert not all(torch.equal(p, q) for p, q in zip(blocks(model)[1].parameters(), blocks(base)[1].parameters()))
    assert kl.extra_forward_tokens > 0
    fresh = build_model(architecture, tok)
    first = KLToBase(1.0)
    first.start(fresh)
    batch = collate(examples[:4], pad)
    logits = fresh(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert float(first.micro_loss(fresh, batch, logits, 10).detach()) == 0.0
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    task = tmp_path / "t.parquet"
    pd.DataFrame({"prompt": texts[:16], "response": texts[8:], "split": ["train"] * 12 + ["validation"] * 4}).to_parquet(task)
    lora = {**SETTINGS, "method": "lora", "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": targets}}
    finetune(str(tmp_path / "base"), str(task), lora, 1, str(tmp_path / "lora"))
    cpu = torch.device("cpu")
    reference = dict(load_model(tmp_path / "base", cpu, torch.float32).named_parameters())
    merged = load_model(interpolate(str(tmp_path / "base"), str(tmp_path / "lora"), 0.0, tmp_path / "a0"), cpu,
                        torch.float32)
    assert all(torch.equal(p, reference[n]) for n, p in merged.named_parameters())
