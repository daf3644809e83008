"""Fine-tuning: labels, schedule, accumulation, LoRA, and whole-or-nothing checkpoints."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.data import demo
from forgetmap.data.chat import encode_chat
from forgetmap.models import load_model, load_tokenizer
from forgetmap.nll import TorchScorer
from forgetmap.data.batches import IGNORE, collate, planned_steps, task_batches
from forgetmap.data.chat import Encoded
from forgetmap.train import finetune, lr_at, train
from helpers import half_only_attention, tiny_model, tiny_tokenizer

SETTINGS = {"method": "full", "steps": 3, "batch_size": 4, "grad_accum": 1, "lr": 1e-3, "warmup_steps": 1,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "max_epochs": None, "max_length": 48, "seed": 0,
            "gradient_checkpointing": False, "bf16": True, "processes": 1, "device": "cpu", "attention": "sdpa",
            "chat_template": "olmo", "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    tok = tiny_tokenizer()
    path = tmp_path_factory.mktemp("base")
    tiny_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def task_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "mod10_add.parquet"
    demo.task_examples("mod10_add", 24, 1234, 0.25).to_parquet(path)
    return path


def test_labels_cover_the_response_and_eos_only():
    tok = tiny_tokenizer()
    [e] = encode_chat(tok, ["Compute 2 + 3."], ["2 + 3 = 5."], "olmo", 64)
    batch = collate([e, e], tok.pad_token_id)
    labels = batch["labels"][0].numpy()
    targets = labels[labels != IGNORE]
    assert tok.decode(targets) == "2 + 3 = 5.<|endoftext|>"
    assert (labels[:e.target_start] == IGNORE).all()


def test_schedule_warms_up_then_decays_linearly_to_zero():
    lrs = [lr_at(s, 1.0, 2, 10) for s in range(10)]
    assert lrs[0] == 0.5 and lrs[1] == 1.0 and lrs[2] == 1.0
    assert np.allclose(np.diff(lrs[2:]), -1 / 8) and lrs[-1] == pytest.approx(1 / 8)


def test_steps_are_capped_at_max_epochs():
    assert planned_steps({**SETTINGS, "steps": 1000, "max_epochs": 3, "batch_size": 4, "grad_accum": 2}, 100) == 37
    assert planned_steps({**SETTINGS, "steps": 5, "max_epochs": 3}, 100) == 5


def test_gradient_accumulation_equals_one_large_batch(tmp_path):
    tok = tiny_tokenizer()
    frame = demo.task_examples("city_qa", 16, 1234, 0.0)
    examples = encode_chat(tok, frame["prompt"].tolist(), frame["response"].tolist(), "olmo", 48)
    one, two = tiny_model(tok), tiny_model(tok)
    train(one, task_batches(examples, 8, 1, 0), 1, SETTINGS, tok.pad_token_id, tmp_path / "a.jsonl")
    train(two, task_batches(examples, 4, 2, 0), 1, SETTINGS, tok.pad_token_id, tmp_path / "b.jsonl")
    for p, q in zip(one.parameters(), two.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.jsonl", "b.jsonl"))
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_full_finetune_writes_checkpoint_and_log_and_is_deterministic(tmp_path, base_dir, task_path):
    for run in ("one", "two"):
        summary = finetune(str(base_dir), str(task_path), SETTINGS, 1, str(tmp_path / run))
        assert summary["steps"] == 3 and summary["examples"] == 18
    log = [json.loads(line) for line in (tmp_path / "one/train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3]
    assert all({"loss", "lr", "tokens_per_s"} <= set(r) for r in log)
    a = load_model(tmp_path / "one", torch.device("cpu"), torch.float32)
    b = load_model(tmp_path / "two", torch.device("cpu"), torch.float32)
    base = load_model(base_dir, torch.device("cpu"), torch.float32)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), base.parameters()))


def test_lora_checkpoint_is_an_adapter_that_scoring_merges(tmp_path, base_dir, task_path):
    out = tmp_path / "lora"
    finetune(str(base_dir), str(task_path), {**SETTINGS, "method": "lora", "lr": 1e-2}, 1, str(out))
    assert (out / "adapter_config.json").exists() and (out / "base.json").exists()
    assert not (out / "model.safetensors").exists()
    tok = load_tokenizer(out)
    merged = load_model(out, torch.device("cpu"), torch.float32)
    base = load_model(base_dir, torch.device("cpu"), torch.float32)
    enc = encode_chat(tok, ["Compute 1 + 1."], ["1 + 1 = 2."], "olmo", 48)
    after = TorchScorer(merged, tok.pad_token_id).score(enc)[0]
    before = TorchScorer(base, tok.pad_token_id).score(enc)[0]
    assert np.isfinite(after).all() and not np.allclose(after, before)


def test_failing_finetune_leaves_no_partial_checkpoint(tmp_path, base_dir, task_path):
    bad = {**SETTINGS, "method": "lora", "lora": {**SETTINGS["lora"], "target_modules": ["no_such_module"]}}
    with pytest.raises(ValueError):
        finetune(str(base_dir), str(task_path), bad, 1, str(tmp_path / "ckpt"))
    assert list(tmp_path.iterdir()) == []


def test_two_fsdp_processes_train_as_one_process_with_the_same_global_batch(tmp_path, base_dir, task_path):
    """The distributed path (torchrun, FSDP, gloo on CPU) on the tiny model: rank 0 reads the weights, rank 1
    builds on the meta device and receives its shards; gradients reduce once per step. 2 processes x 1
    micro-batch per step give the weights of 1 process x 2 accumulated micro-batches, and a loadable checkpoint.
    Both are monitored (finetune.monitor): under FSDP the ranks score their shares of the 7 probes' batches in
    step, and the probes' NLL at each check is the one process's."""
    probes = demo.task_examples("mod10_add", 7, 99, 0.0)
    probes = probes.assign(example_id=[f"p{i}" for i in range(len(probes))], kind="chat", text=None, source="quiz")
    probes.to_parquet(tmp_path / "probes.parquet")
    monitor = {"every": 2, "at": [], "chat_template": "olmo", "max_length": 48, "token_budget": 96}
    single = finetune(str(base_dir), str(task_path), {**SETTINGS, "grad_accum": 2, "monitor": monitor}, 1,
                      str(tmp_path / "one"), probes=str(tmp_path / "probes.parquet"))
    double = finetune(str(base_dir), str(task_path), {**SETTINGS, "processes": 2, "monitor": monitor}, 2,
                      str(tmp_path / "two"), probes=str(tmp_path / "probes.parquet"))
    assert double["processes"] == 2 and double["steps"] == single["steps"] == 3
    assert (double["monitor_parallelism"], single["monitor_parallelism"]) == ("fsdp2", "local")
    records = [pd.read_parquet(tmp_path / run / "monitor.parquet") for run in ("one", "two")]
    assert list(records[1].columns) == ["example_id", "step_0", "step_2", "step_3"]
    np.testing.assert_allclose(records[1].iloc[:, 1:], records[0].iloc[:, 1:], atol=1e-5)
    assert np.abs(records[1]["step_3"] - records[1]["step_0"]).max() > 1e-3  # the probes moved
    a = load_model(tmp_path / "one", torch.device("cpu"), torch.float32)
    b = load_model(tmp_path / "two", torch.device("cpu"), torch.float32)
    assert json.loads((tmp_path / "two/config.json").read_text())["architectures"] == [type(a).__name__]
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-5), name
    logs = [[json.loads(x) for x in (tmp_path / run / "train_log.jsonl").read_text().splitlines()] for run in ("one", "two")]
    assert [r["loss"] for r in logs[0]] == pytest.approx([r["loss"] for r in logs[1]], rel=1e-4)


def test_a_loss_mask_drops_tokens_from_the_labels_and_from_the_normaliser():
    tok = tiny_tokenizer()
    [e] = encode_chat(tok, ["Compute 2 + 3."], ["2 + 3 = 5."], "olmo", 64)
    mask = np.ones(len(e.ids), dtype=bool)
    mask[e.target_start + 1:e.target_start + 3] = False  # two response tokens carry no loss
    masked = Encoded(e.ids, e.target_start, e.score_end, loss_mask=mask)
    labels = collate([masked], tok.pad_token_id)["labels"][0].numpy()
    kept = np.flatnonzero(labels != IGNORE)
    assert kept.tolist() == masked.target_positions().tolist()
    assert len(kept) == e.n_targets - 2 == masked.n_targets
    assert collate([masked], tok.pad_token_id)["weights"] is None  # unit weights: the plain mean


def test_the_loss_is_the_weighted_sum_over_kept_tokens_divided_by_their_count(tmp_path):
    """A step's logged loss from a masked, weighted batch equals the mean computed by hand."""
    tok = tiny_tokenizer()
    frame = demo.task_examples("city_qa", 4, 1234, 0.0)
    plain = encode_chat(tok, frame["prompt"].tolist(), frame["response"].tolist(), "olmo", 48)
    rng = np.random.default_rng(0)
    examples = []
    for i, e in enumerate(plain):
        mask = rng.random(len(e.ids)) < 0.7
        examples.append(Encoded(e.ids, e.target_start, e.score_end, loss_mask=mask, weight=0.5 + i))
    model = tiny_model(tok)
    expected_sum, kept = 0.0, 0
    with torch.no_grad():
        for e in examples:
            logp = torch.log_softmax(model(input_ids=torch.from_numpy(e.ids[None])).logits[0].float(), -1)
            positions = e.target_positions()
            expected_sum += e.weight * float(-logp[positions - 1, torch.from_numpy(e.ids[positions])].sum())
            kept += len(positions)
    train(model, iter([[examples]]), 1, SETTINGS, tok.pad_token_id, tmp_path / "log.jsonl")
    log = json.loads((tmp_path / "log.jsonl").read_text())
    assert log["targets"] == kept == sum(e.n_targets for e in examples)
    assert log["loss"] == pytest.approx(expected_sum / kept, rel=1e-5)


def test_training_only_draws_from_its_batch_source(tmp_path):
    """The loop trains on exactly what the source yields: the same examples from two sources that
    order them alike give the same weights, whatever else the sources hold."""
    tok = tiny_tokenizer()
    frame = demo.task_examples("city_qa", 8, 1234, 0.0)
    examples = encode_chat(tok, frame["prompt"].tolist(), frame["response"].tolist(), "olmo", 48)
    steps = [[examples[:4]], [examples[4:]]]
    one, two = tiny_model(tok), tiny_model(tok)
    train(one, iter(steps), 2, SETTINGS, tok.pad_token_id, None)
    train(two, iter(steps + [[examples[::-1]]]), 2, SETTINGS, tok.pad_token_id, None)
    assert all(torch.equal(p, q) for p, q in zip(one.parameters(), two.parameters()))


def test_the_loss_over_kept_positions_only_equals_the_full_logits_loss_with_its_gradients():
    from forgetmap.train import batch_loss, kept_loss

    tok = tiny_tokenizer()
    frame = demo.task_examples("city_qa", 6, 1234, 0.0)
    examples = encode_chat(tok, frame["prompt"].tolist(), frame["response"].tolist(), "olmo", 48)
    examples[1] = Encoded(examples[1].ids, examples[1].target_start, examples[1].score_end, weight=2.0)
    batch = collate(examples, tok.pad_token_id)
    losses, grads = [], []
    for kept in (False, True):
        model = tiny_model(tok)
        if kept:
            loss = kept_loss(model, batch, 50)
        else:
            loss = batch_loss(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                              batch, 50)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_a_steps_micro_batches_are_grouped_by_length_and_hold_the_same_examples():
    examples = [Encoded(np.arange(n), 1, n) for n in (5, 30, 6, 28, 7, 29, 4, 31)]
    grouped = next(task_batches(examples, 2, 4, 0))
    plain = next(task_batches(examples, 8, 1, 0))[0]
    assert sorted(len(e.ids) for mb in grouped for e in mb) == sorted(len(e.ids) for e in plain)
    widths = [max(len(e.ids) for e in mb) for mb in grouped]
    assert widths == sorted(widths) and sum(w * 2 for w in widths) < 31 * 8  # padding only within a group


def test_the_head_check_before_training_runs_in_trainings_precision():
    """flash-attention takes only fp16/bf16 while training keeps fp32 weights under bf16 autocast: the check
    whether the kept positions alone may meet the output head must run inside that autocast (it ran
    outside it and crashed every single-GPU fine-tune with flash-attn installed). An attention function
    that refuses fp32 as flash-attn does stands in for its kernel here, CPU autocast for CUDA's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from forgetmap.nll import head_reproduces_logits
    from forgetmap.train import kept_positions_only

    half_only_attention("half_only_test")
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="half_only_test")  # fp32 weights
    with pytest.raises(RuntimeError, match="fp16 and bf16"):
        head_reproduces_logits(model, torch.arange(1, 9))  # outside autocast: what crashed
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    assert kept_positions_only(model, torch.device("cuda"), 1, bf16)
    assert not kept_positions_only(model, torch.device("cuda"), 2, bf16)  # FSDP: the full forward
    assert not kept_positions_only(model, torch.device("cpu"), 1, bf16)


def test_a_training_process_waits_at_collectives_as_long_as_the_config_says(monkeypatch):
    """torch's 10 minutes are less than rank 0 takes to read or write a 7B model: the process group's
    timeout is `finetune.process_group_timeout` minutes (torchrun's workers are stood in for: the group's
    creation is recorded and the worker stops there)."""
    from datetime import timedelta

    import torch.distributed as dist

    from forgetmap.config.schema import FINETUNE, with_defaults
    from forgetmap.train import worker_main

    created = {}

    def init_process_group(backend, **kwargs):
        created.update(backend=backend, **kwargs)
        raise KeyboardInterrupt  # nothing past the group's creation runs

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    settings = with_defaults(FINETUNE, {"device": "cpu", "process_group_timeout": 90})
    with pytest.raises(KeyboardInterrupt):
        worker_main(["--base", "b", "--task", "t", "--settings", json.dumps(settings), "--into", "x"])
    assert created == {"backend": "gloo", "timeout": timedelta(minutes=90)}
    assert with_defaults(FINETUNE, {})["process_group_timeout"] == 60
