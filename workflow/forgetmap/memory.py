"""What a model needs of a device's memory, read from its config alone: the weights are never loaded.

The parameters are counted as `accelerate estimate-memory` counts them, on a model built on the meta
device (tied embeddings counted once, every architecture transformers knows, no hand-kept formula); the
attention shape (layers, key-value heads, head dimension) sizes the key-value cache a serving engine keeps
per token. `engine_need` is what vLLM must hold on each GPU before it can serve one request of its longest
length: its share of the weights (tensor parallelism splits them over the job's GPUs) and of one
max-length sequence's cache. vLLM's activation peak and CUDA context come on top, so the figure is a floor:
a job below it cannot start, a job above it may still be refused by the engine's own profiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .errors import ForgetmapError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2}
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """A causal LM's size: its parameters and the attention shape its key-value cache follows."""

    parameters: int
    layers: int
    kv_heads: int
    head_dim: int

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """A key and a value per layer, head and dimension, for one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def shape(directory: str | Path) -> Shape:
    """The shape of the checkpoint whose config.json is in `directory` (a meta-device model: no memory)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(directory))
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())  # shared (tied) tensors are yielded once
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return Shape(int(parameters), int(text.num_hidden_layers), int(kv_heads), int(head_dim))


def engine_need(model: Shape, dtype: str, max_model_len: int, gpus: int) -> tuple[float, float]:
    """(weights, one max-length sequence's cache) in bytes on each of `gpus` GPUs for vLLM in `dtype`."""
    size = DTYPE_BYTES[dtype]
    gpus = max(1, gpus)
    return model.parameters * size / gpus, model.kv_bytes_per_token(size) * max_model_len / gpus


def check_engine_fits(model: Shape, dtype: str, max_model_len: int, gpus: int, utilization: float,
                      total: int, where: str) -> None:
    """Refuse an engine whose weights and one sequence's cache exceed the share of each GPU asked of vLLM
    (`total`: one GPU's memory in bytes), naming the keys that change it and the GPUs that would fit."""
    weights, cache = engine_need(model, dtype, max_model_len, gpus)
    share = utilization * total
    if weights + cache <= share:
        return
    enough = math.ceil(gpus * (weights + cache) / share)
    raise ForgetmapError(
        f"{where}: the model does not fit the GPUs the job claims: its {model.parameters / 1e9:.2f}B parameters in "
        f"{dtype} ({weights / GIB:.1f} GiB per GPU) and one {max_model_len}-token sequence's key-value cache "
        f"({cache / GIB:.2f} GiB per GPU) need {(weights + cache) / GIB:.1f} GiB on each of {max(1, gpus)} GPU(s), "
        f"and vLLM may use {utilization:g} x {total / GIB:.1f} GiB = {share / GIB:.1f} GiB of each "
        f"(score.gpu_memory_utilization): claim {enough} GPUs or more for the job (resources.score.gpu for score "
        f"jobs, resources.finetune.gpu for an arm's; tensor parallelism splits the weights over them), or "
        f"score with the torch backend (score.backend)")
