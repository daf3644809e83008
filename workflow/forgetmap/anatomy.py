"""What planning reads of a base model's architecture: its config as JSON, its size and widths (Shape),
its text model's positions, its transformer blocks, its module names and the parameters LoRA adapters add. Each is
read on the meta device (no weights) and, where the architecture is given as its config's JSON, kept on disk once
per architecture (forgetmap.kept), so a plan of an architecture read before imports neither torch nor transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .kept import kept


@dataclass(frozen=True)
class Shape:
    """A causal LM's size: its parameters, its widths and the attention shape its key-value cache follows."""

    parameters: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int = 0
    intermediate: int = 0
    vocab: int = 0
    block: int = 0  # parameters of one transformer block (what FSDP gathers at a time)
    largest: int = 0  # parameters of the largest weight (an embedding, the head, an MLP projection)
    config: str = ""  # the config it was read from, as JSON

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """A key and a value per layer, head and dimension, for one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def config_of(source):
    """A transformers config: given, a config as JSON (a Shape's own record), or a directory's config.json."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(source, PretrainedConfig):
        return source
    if is_json(source):
        values = json.loads(source)
        return AutoConfig.for_model(values.pop("model_type"), **values)
    return AutoConfig.from_pretrained(str(source))


def is_json(source) -> bool:
    """A config given as its JSON (what a kept reading takes), not a directory or a config object."""
    return isinstance(source, str) and source.lstrip().startswith("{")


def empty_model(config):
    """The architecture on the meta device: no weights, no memory."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # a tied output head is the input embedding (the meta build leaves the two apart)
    return model


@kept
def demo_json(vocab_size: int, architecture: dict) -> str:
    """The demo base's config (`models.NAME.base.architecture`) as JSON."""
    from .models import demo_config

    return demo_config(vocab_size, architecture).to_json_string()


def pretrained_json(local: str) -> str:
    """A pretrained base's config as JSON, from the config.json of its directory `local`: kept by that file's text,
    wherever the directory is (the same model in two hub caches is read once). One that cannot be read is read again
    from its own directory, so that the error names it."""
    try:
        return _pretrained_json((Path(local) / "config.json").read_text())
    except Exception:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(local, local_files_only=True).to_json_string()


@kept
def _pretrained_json(text: str) -> str:
    import tempfile

    from transformers import AutoConfig

    with tempfile.TemporaryDirectory() as directory:  # read as from_pretrained reads the base's own directory
        (Path(directory) / "config.json").write_text(text)
        return AutoConfig.from_pretrained(directory, local_files_only=True).to_json_string()


def model_type(config_json: str) -> str | None:
    return json.loads(config_json).get("model_type")


def shape(source):
    """The size of a model (Shape): a directory with its config.json, a transformers config, or a
    config as JSON (read once per architecture and kept). Read from a meta-device model: no memory."""
    if is_json(source):
        return Shape(**_shape(source))
    return Shape(**_shape.made(source))


@kept
def _shape(source) -> dict:
    config = config_of(source)
    model = empty_model(config)
    parameters = sum(p.numel() for p in model.parameters())  # shared (tied) tensors are yielded once
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    block = max((sum(p.numel() for p in m.parameters()) for m in model.modules() if type(m).__name__ in blocks),
                default=0)
    from .models import widths

    hidden, _, kv_heads, head_dim, intermediate = widths(config)
    text = config.get_text_config()
    largest = max(p.numel() for p in model.parameters())
    return {"parameters": int(parameters), "layers": int(text.num_hidden_layers), "kv_heads": int(kv_heads),
            "head_dim": int(head_dim), "hidden": int(hidden), "intermediate": int(intermediate),
            "vocab": int(text.vocab_size), "block": int(block), "largest": int(largest),
            "config": config.to_json_string()}


@kept
def text(config_json: str) -> dict:
    """The text model's hidden size, layers and positions (None where its config names none)."""
    config = config_of(config_json).get_text_config()
    return {"hidden": getattr(config, "hidden_size", None), "layers": getattr(config, "num_hidden_layers", None),
            "positions": getattr(config, "max_position_embeddings", None)}


@kept
def modules(config_json: str) -> dict:
    """The class the config builds, its qualified module names, and its transformer blocks (as
    forgetmap.mitigation.freezing finds them to freeze; None where it finds none)."""
    from .models import blocks

    net = empty_model(config_of(config_json))
    try:
        count = len(blocks(net))
    except ValueError:
        count = None
    return {"class": type(net).__name__, "names": [n for n, _ in net.named_modules() if n], "blocks": count}


def lora_parameters(source, r: int, target_modules: list[str]) -> int:
    """The adapters' parameters: r x (in + out) for every linear layer peft would wrap (a module named as a
    target, or ending in '.target'); `source` as for `shape` (a config as JSON read once and kept)."""
    if is_json(source):
        return _lora_parameters(source, r, list(target_modules))
    return _lora_parameters.made(source, r, target_modules)


@kept
def _lora_parameters(source, r: int, target_modules: list[str]) -> int:
    import torch

    from .models import matching_names

    linear = {name: m for name, m in empty_model(config_of(source)).named_modules() if isinstance(m, torch.nn.Linear)}
    wrapped = {name for found in matching_names(list(linear), target_modules).values() for name in found}
    return sum(r * (linear[name].in_features + linear[name].out_features) for name in wrapped)
