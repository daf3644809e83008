"""A model sharded over FSDP's processes, read and written without the whole of it in one host's memory.

Loading: every rank builds the architecture with its parameters on the meta device (its buffers, such as
rotary frequencies, computed for real on the CPU), shards every transformer block and then the root, gives
its shards memory on its device, and reads its own rows of each parameter from the checkpoint's safetensors
files (a slice read through the file's memory map): the host holds at most one slice at a time. A base
whose weights are not in safetensors files is read by rank 0 alone and broadcast, tensor by tensor.

Saving: each parameter is gathered whole, one at a time, and rank 0 writes Hugging Face's sharded
safetensors (`model-00001-of-0000N.safetensors` and `model.safetensors.index.json`), closing a file once its
tensors reach `max_file_bytes`: the host holds at most one file's tensors, never the model.

Mixed precision is FSDP's own: with bf16 on a GPU the shards stay fp32 (the optimizer's master weights),
each block is gathered in bf16 for its forward and backward and freed after, and gradients are reduced in
fp32 (`MixedPrecisionPolicy`), so no unsharded copy of the weights outlives its block.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from .memory import MAX_FILE_BYTES


def shard(model, mixed_precision: bool) -> None:
    """FSDP (fully_shard) on every transformer block the model names as unsplittable, then the root; bf16
    compute with fp32 master weights and fp32 gradient reduction where `mixed_precision`."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision \
        else MixedPrecisionPolicy()
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def rows(n: int, rank: int, world: int) -> tuple[int, int]:
    """The rows of a dimension of `n` that rank `rank` holds under Shard(0) (torch.chunk's split)."""
    size = -(-n // world)
    start = min(rank * size, n)
    return start, min(start + size, n)


def weight_files(directory: str | Path) -> dict[str, Path] | None:
    """Tensor name -> the safetensors file that holds it (the index, or one model.safetensors); None where
    the checkpoint has no safetensors files."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.exists():
        return {name: directory / file for name, file in json.loads(index.read_text())["weight_map"].items()}
    single = directory / "model.safetensors"
    if single.exists():
        from safetensors import safe_open

        with safe_open(str(single), framework="pt") as f:
            return {name: single for name in f.keys()}
    return None


def load_sharded(base_dir: str, device: torch.device, attention: str, rank: int, world: int,
                 mixed_precision: bool = False):
    """The base model sharded over the ranks (full fine-tuning under FSDP); returns (model, parameters,
    class name)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from .models import model_source, n_parameters

    source, kwargs = model_source(base_dir)
    config = AutoConfig.from_pretrained(source, **kwargs)
    with init_empty_weights(include_buffers=False):  # parameters on the meta device, buffers computed
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attention, dtype=torch.float32)
    model.tie_weights()  # a tied output head is the input embedding's tensor (the meta build leaves it apart)
    parameters, architecture = n_parameters(model), type(model).__name__
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    shard(model, mixed_precision)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            buffer.copy_(buffers[name])
    files = weight_files(source) if Path(source).is_dir() else None
    if files is None:
        _broadcast_weights(model, base_dir, attention, rank)
    else:
        _read_own_rows(model, files, rank, world)
    return model, parameters, architecture


def _read_own_rows(model, files: dict[str, Path], rank: int, world: int) -> None:
    """Each parameter's local shard filled from its file: only this rank's rows are read. A parameter the
    files lack is a tied one (the output head sharing the input embedding): it is the same tensor."""
    from safetensors import safe_open

    handles = {}
    try:
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name not in files:
                    continue
                path = files[name]
                if path not in handles:
                    handles[path] = safe_open(str(path), framework="pt")
                local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
                start, end = rows(parameter.shape[0], rank, world)
                if end > start:
                    local[: end - start].copy_(handles[path].get_slice(name)[start:end])
    finally:
        handles.clear()


def _broadcast_weights(model, base_dir: str, attention: str, rank: int) -> None:
    """Rank 0 reads the whole checkpoint on the CPU and every rank receives its shards from it, tensor by
    tensor (a checkpoint without safetensors files)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from .models import load_model

    full = load_model(base_dir, torch.device("cpu"), torch.float32, attention) if rank == 0 else None
    state = full.state_dict() if full is not None else {}
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del full, state


def save_sharded(model, into: Path, architecture: str, rank: int, max_file_bytes: int = MAX_FILE_BYTES) -> None:
    """Every rank gathers each parameter whole, one at a time; rank 0 writes the safetensors files, each
    closed once its tensors reach `max_file_bytes`, their index and the config (naming the model's own class:
    FSDP swapped in a subclass). Tied parameters are written once, as save_pretrained writes them."""
    from safetensors.torch import save_file

    named = list(model.named_parameters())
    sizes = [p.numel() * p.element_size() for _, p in named]
    groups, current, total = [], [], 0
    for i, size in enumerate(sizes):
        if current and total + size > max_file_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    weight_map = {}
    for number, group in enumerate(groups, start=1):
        file = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for i in group:
            name, parameter = named[i]
            whole = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter.detach()
            if rank == 0:
                tensors[name] = whole.detach().to("cpu").contiguous()  # on a GPU, its copy on the host
                weight_map[name] = file
            del whole
        if rank == 0:
            save_file(tensors, str(Path(into) / file), metadata={"format": "pt"})
        del tensors
    if rank == 0:
        index = {"metadata": {"total_size": int(sum(sizes))}, "weight_map": weight_map}
        (Path(into) / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        model.config.architectures = [architecture]
        model.config.save_pretrained(into)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(into)
    if dist.is_initialized():
        dist.barrier()
