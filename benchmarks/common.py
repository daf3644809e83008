"""Shared pieces of the benchmarks: model shapes with random weights, example sets, peak FLOP/s."""

from __future__ import annotations

import platform
import time

import torch

# Real architectures with random weights (no weights can be downloaded): name -> (family, config kwargs)
SHAPES = {
    "demo": ("llama", dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4)),
    "small": ("llama", dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8)),
    "olmo-1b": ("olmo", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
                             vocab_size=50304)),
    "pythia-1b": ("gpt_neox", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=8, vocab_size=50304)),
}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def build(shape: str, vocab_size: int, device: torch.device, dtype: torch.dtype, attention: str = "sdpa"):
    from transformers import AutoConfig, AutoModelForCausalLM

    family, kwargs = SHAPES[shape]
    kwargs = {"vocab_size": vocab_size, "max_position_embeddings": 4096, **kwargs}
    config = AutoConfig.for_model(family, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    return model.to(device).eval()


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch thread(s)"


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def timed(fn, device: torch.device) -> tuple[object, float]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start
