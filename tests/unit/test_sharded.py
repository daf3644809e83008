"""FSDP's processes read and write a checkpoint without the whole model in one host's memory: each rank reads
its own rows of every weight, and the weights are written file by file (forgetmap.sharded)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import tiny_model, tiny_tokenizer
from standins import save_standin

HERE = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(__import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
def test_two_ranks_load_and_save_a_checkpoint_holding_a_fraction_of_it_each(tmp_path):
    """A Llama stand-in (6 MB of fp32 weights) loaded by two gloo ranks and written back in files of a
    quarter of it: each rank's host memory rises by at most 0.6 of the model while loading (its half, and one
    slice being read; reading it whole on rank 0 held 1.5) and by at most 0.4 while saving (one file's
    tensors and one gathered weight; gathering the full state held 1.0). The files and their index load with
    from_pretrained and equal the checkpoint they were read from."""
    from transformers import AutoModelForCausalLM

    base = save_standin(tmp_path / "base", "llama", width=256, vocab_size=400)
    size = sum(p.numel() * p.element_size() for p in AutoModelForCausalLM.from_pretrained(base).parameters())
    (tmp_path / "out").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent / "workflow"), str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(HERE / "fsdp_probe.py"), str(base), str(tmp_path / "out"), str(size // 4),
                           str(tmp_path / "peaks")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        peaks = json.loads((tmp_path / f"peaks.{rank}").read_text())
        print(f"rank {rank}: loading {peaks['load'] / size:.2f}, saving {peaks['save'] / size:.2f} of the model")
        assert peaks["load"] <= 0.6 * size and peaks["save"] <= 0.4 * size, (rank, peaks, size)
    files = sorted(p.name for p in (tmp_path / "out").glob("model-*.safetensors"))
    assert len(files) >= 4 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((tmp_path / "out/model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(files) and index["metadata"]["total_size"] == size
    saved = dict(AutoModelForCausalLM.from_pretrained(tmp_path / "out").named_parameters())
    for name, parameter in AutoModelForCausalLM.from_pretrained(base).named_parameters():
        assert torch.equal(saved[name], parameter), name


def test_fsdp_computes_in_bf16_over_fp32_shards_with_fp32_gradient_reduction_on_a_gpu(monkeypatch):
    """Mixed precision the FSDP way (a GPU with bf16): every block and the root are sharded with bf16 as the
    gathered parameters' dtype and fp32 for the reduced gradients, the shards (the optimizer's master weights)
    staying fp32; without it (a CPU, gloo) the policy casts nothing. fully_shard's calls are recorded."""
    import torch.distributed.fsdp as fsdp
    from transformers import AutoModelForCausalLM

    from forgetmap.sharded import shard

    model = AutoModelForCausalLM.from_config(tiny_model(tiny_tokenizer()).config)
    calls = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda module, mp_policy: calls.append((type(module).__name__, mp_policy)))
    shard(model, mixed_precision=True)
    assert [name for name, _ in calls] == ["LlamaDecoderLayer", "LlamaDecoderLayer", "LlamaForCausalLM"]
    assert all(p.param_dtype == torch.bfloat16 and p.reduce_dtype == torch.float32 for _, p in calls)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    calls.clear()
    shard(model, mixed_precision=False)
    assert all(p.param_dtype is None and p.reduce_dtype is None for _, p in calls)
