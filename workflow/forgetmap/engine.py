"""vLLM's engine as forgetmap runs it (the `vllm` scoring backend; `pip install forgetmap[gpu]`, or vLLM's
CPU build): which options the platform and the job decide, whether the engine can start where it is
asked to (the memory share free, the weights and one sequence's cache within it), and one engine per job
whose weights are reloaded for each next checkpoint. What the engine computes is read elsewhere: NLL from
its prompt log-probs (forgetmap.nll), answers from its generations (forgetmap.generation).

vLLM is imported inside the functions that start an engine, never at import time: the CPU path runs
without it.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

from .errors import ForgetmapError
from .anatomy import Shape
from .memory import DTYPE_BYTES, GIB


def vllm_lengths(lengths: list[int], positions: int | None) -> tuple[int, int]:
    """(max_model_len, the longest prompt vLLM may score). vLLM needs room for the prompt and one output
    token, and refuses a max_model_len above the model's positions: prompts of up to positions - 1 fit."""
    longest = max(lengths, default=1)
    if positions is None:
        return longest + 1, longest
    return min(longest + 1, positions), min(longest, positions - 1)


def weights_dir(model_dir: str) -> Path:
    """The directory holding a checkpoint's weights: itself, or the local files a base pointer names (the
    files planning found, never a hub lookup)."""
    from .models import read_pointer

    if (Path(model_dir) / "adapter_config.json").exists():
        raise RuntimeError(f"{model_dir}: the vllm backend scores full checkpoints; use the torch backend for LoRA")
    pointer = read_pointer(model_dir) if not (Path(model_dir) / "config.json").exists() else None
    return Path((pointer.get("local") or pointer["path"]) if pointer else model_dir)


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


def vllm_engine(model_dir: str, max_model_len: int, settings: dict, seeded: bool = False):  # pragma: no cover - vLLM
    """A vLLM engine on the model's weights (`pip install forgetmap[gpu]`; on a CPU, vLLM's CPU build).
    Scoring is prefill only: eager mode skips the CUDA-graph capture that would otherwise start every shard
    job. What the engine's platform and the job decide (`engine_options`) is never the user's to set."""
    try:
        from vllm import LLM
        from vllm.platforms import current_platform
    except ImportError:
        raise ForgetmapError("config key score.backend: vllm, and vLLM is not installed in this environment: "
                          "pip install 'forgetmap[gpu]' (CUDA), or set score.backend: torch") from None
    from .devices import visible_devices
    from .anatomy import shape
    from .models import release_memory

    source = weights_dir(model_dir)
    cpu = current_platform.is_cpu()
    options = engine_options(settings, seeded, cpu, len(visible_devices() or []))
    model = shape(source)
    release_memory()  # what torch held in this process is given back before the engine measures free memory
    if cpu:
        check_heads(model.head_dim, cpu_head_sizes(), model_dir)
    else:
        import torch

        memory = [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]
        free_share(settings["gpu_memory_utilization"], memory)
        check_engine_fits(model, options["dtype"], max_model_len, options["tensor_parallel_size"],
                          settings["gpu_memory_utilization"], min(total for _, total in memory), str(model_dir))
    try:
        return LLM(model=str(source), max_model_len=max_model_len, **options)
    except (RuntimeError, ValueError) as exc:  # the engine's own log above holds its core process's traceback
        raise ForgetmapError(f"{model_dir}: vLLM's engine did not start (max_model_len {max_model_len}, "
                             f"{', '.join(f'{k}={v}' for k, v in options.items())}): {exc}") from None


def cpu_head_sizes() -> list[int]:  # pragma: no cover - vLLM
    """The head dimensions vLLM's CPU attention computes, as its backend declares them."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return list(AttentionBackendEnum.CPU_ATTN.get_class().get_supported_head_sizes())


def check_heads(head_dim: int, supported: list[int], model_dir: str) -> None:
    """vLLM's CPU build starts an engine on any head size and its first step dies on one its attention
    lacks: refuse before it starts, naming the sizes it has."""
    if head_dim not in supported:
        raise ForgetmapError(f"{model_dir}: the model's attention heads have {head_dim} dimensions and vLLM's CPU "
                             f"attention computes {', '.join(map(str, supported))}: score it with score.backend: "
                             f"torch, or with vLLM on a GPU")


@contextmanager
def engine_failures(model_dir: str):
    """An engine that dies at work (its core process or a worker raised: vLLM's `EngineDeadError`) ends the
    job with an error naming the checkpoint; the engine's own log above it holds the cause."""
    try:
        yield
    except Exception as exc:  # vLLM is not imported here: its class is known by name
        if type(exc).__name__ != "EngineDeadError":
            raise
        raise ForgetmapError(f"{model_dir}: vLLM's engine stopped while it worked; the error of its worker or "
                             f"core process, in the log above, says why (score.backend: torch scores without "
                             f"vLLM)") from None


def free_share(utilization: float, memory: list[tuple[int, int]]) -> None:
    """vLLM starts only where `utilization` of each GPU's memory is free: refuse before it, naming the key,
    with the share that is free (`memory`: (free, total) bytes per GPU of the job)."""
    for device, (free, total) in enumerate(memory):
        if free < utilization * total:
            raise ForgetmapError(f"config key score.gpu_memory_utilization: {utilization:g} of GPU {device}'s "
                              f"{total / 2**30:.1f} GiB is asked of vLLM and {free / 2**30:.1f} GiB "
                              f"({free / total:.2f}) is free (other processes, or this job's own, hold the rest); "
                              f"lower it to {math.floor(100 * free / total) / 100:.2f} or less, or give the job "
                              f"a GPU of its own")


class VllmEngines:
    """A job's one vLLM engine: started for its first checkpoint, and for each next checkpoint of the same
    architecture (an arm's fine-tunes and their interpolations) the weights are reloaded into it in place
    (vLLM's `reload_weights`, the prefix cache reset), so the job starts one engine and holds its memory
    once; a checkpoint of another architecture, or one needing a longer context, gets a new engine."""

    def __init__(self):
        self.llm, self.key, self.max_model_len = None, None, 0

    def engine(self, model_dir: str, max_model_len: int, settings: dict, seeded: bool):  # pragma: no cover - vLLM
        source = weights_dir(model_dir)
        key = (architecture(source), settings["dtype"], seeded)
        if self.llm is not None and key == self.key and max_model_len <= self.max_model_len:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(source)})
            self.llm.reset_prefix_cache()  # cached prompts hold the old weights' keys and values
            return self.llm
        self.close()
        self.llm = vllm_engine(model_dir, max_model_len, settings, seeded)
        self.key, self.max_model_len = key, max_model_len
        return self.llm

    def close(self) -> None:  # pragma: no cover - vLLM
        """Shut the engine down (its core process and its memory) before anything else starts."""
        import gc

        if self.llm is not None:
            core = getattr(self.llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
            gc.collect()


def architecture(directory: Path) -> str:
    """A checkpoint's architecture as its config.json gives it, without names, versions or dtypes: equal
    for a model and its fine-tunes."""
    import json

    config = json.loads((directory / "config.json").read_text())
    kept = {k: v for k, v in config.items() if not k.startswith("_") and k not in ("transformers_version", "torch_dtype",
                                                                                     "dtype")}
    return json.dumps(kept, sort_keys=True)


def engine_options(settings: dict, seeded: bool, cpu: bool, gpus: int) -> dict:
    """The engine's options from its platform and the job: the dtype (`score.dtype`; auto is bf16 on a GPU
    and fp32 on a CPU, as the torch backend reads it), tensor parallelism over the GPUs the job claimed, the
    memory share, eager mode; on vLLM's CPU build, chunked prefill off where requests carry their own
    seeds (a CPU generator cannot be rewound to resume a chunked prompt: "CPU Generator does not use offset")."""
    options = {"dtype": vllm_dtype(settings["dtype"], cpu), "enforce_eager": True,
               "gpu_memory_utilization": settings["gpu_memory_utilization"],
               "tensor_parallel_size": 1 if cpu else max(1, gpus)}
    if cpu and seeded:
        options["enable_chunked_prefill"] = False
    return options


def vllm_dtype(requested: str, cpu: bool = False) -> str:
    """The engine's dtype from `score.dtype`, as the torch backend reads it: `auto` is bf16 on a GPU, fp32
    on a CPU."""
    if requested == "auto":
        return "float32" if cpu else "bfloat16"
    return requested
