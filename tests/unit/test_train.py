"""Fine-tuning: labels, schedule, accumulation, LoRA, and whole-or-nothing checkpoints."""

import json

import numpy as np
import pytest
import torch

from forgetmap.data import demo
from forgetmap.data.chat import encode_chat
from forgetmap.models import load_model, load_tokenizer
from forgetmap.score import TorchScorer
from forgetmap.train import IGNORE, collate, finetune, lr_at, planned_steps, train
from helpers import tiny_model, tiny_tokenizer

SETTINGS = {"method": "full", "steps": 3, "batch_size": 4, "grad_accum": 1, "lr": 1e-3, "warmup_steps": 1,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "max_epochs": None, "max_length": 48, "seed": 0,
            "gradient_checkpointing": False, "bf16": True, "device": "cpu", "attention": "sdpa",
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
    train(one, examples, {**SETTINGS, "steps": 1, "batch_size": 8}, tok.pad_token_id, tmp_path / "a.jsonl")
    train(two, examples, {**SETTINGS, "steps": 1, "batch_size": 4, "grad_accum": 2}, tok.pad_token_id, tmp_path / "b.jsonl")
    for p, q in zip(one.parameters(), two.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.jsonl", "b.jsonl"))
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_full_finetune_writes_checkpoint_and_log_and_is_deterministic(tmp_path, base_dir, task_path):
    for run in ("one", "two"):
        summary = finetune(str(base_dir), str(task_path), str(tmp_path / run), SETTINGS, threads=1)
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
    finetune(str(base_dir), str(task_path), str(out), {**SETTINGS, "method": "lora", "lr": 1e-2}, threads=1)
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
        finetune(str(base_dir), str(task_path), str(tmp_path / "ckpt"), bad, threads=1)
    assert list(tmp_path.iterdir()) == []


def test_two_fsdp_processes_train_as_one_process_with_the_same_global_batch(tmp_path, base_dir, task_path):
    """The distributed path (torchrun, FSDP, gloo on CPU) on the tiny model: 2 processes x 1 micro-batch
    per step give the weights of 1 process x 2 accumulated micro-batches, and a loadable checkpoint."""
    single = finetune(str(base_dir), str(task_path), str(tmp_path / "one"), {**SETTINGS, "grad_accum": 2}, threads=1)
    double = finetune(str(base_dir), str(task_path), str(tmp_path / "two"), {**SETTINGS, "processes": 2}, threads=2)
    assert double["processes"] == 2 and double["steps"] == single["steps"] == 3
    a = load_model(tmp_path / "one", torch.device("cpu"), torch.float32)
    b = load_model(tmp_path / "two", torch.device("cpu"), torch.float32)
    assert json.loads((tmp_path / "two/config.json").read_text())["architectures"] == [type(a).__name__]
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-5), name
    logs = [[json.loads(x) for x in (tmp_path / run / "train_log.jsonl").read_text().splitlines()] for run in ("one", "two")]
    assert [r["loss"] for r in logs[0]] == pytest.approx([r["loss"] for r in logs[1]], rel=1e-4)
