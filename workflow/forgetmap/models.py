"""Build or load models and tokenizers; choose device, dtype and attention implementation.

A model directory is one of:
- a `save_pretrained` checkpoint (config.json, weights, tokenizer files);
- a LoRA adapter checkpoint (adapter_config.json) with a `base.json` naming the model it adapts;
- a base pointer: only `base.json`, `{"path": <local dir or HF id>}`, for real base models that the
  user's environment provides.
torch, transformers and peft are imported inside functions so that importing forgetmap stays cheap (a dry run
reads the demo's config through `demo_config` without torch).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

POINTER = "base.json"
PAD_CANDIDATES = ("<|padding|>", "<|pad|>", "<pad>")


def set_threads(threads: int) -> None:
    """Give torch exactly the rule's threads: oversubscribing small CPUs is 30-50x slower."""
    import torch

    torch.set_num_threads(max(1, int(threads)))
    os.environ["OMP_NUM_THREADS"] = str(max(1, int(threads)))


WARM_NOTE = "; forked from the run's warm process"  # said after a job's device (forgetmap.cost.learned reads it)
FORKED = False  # this process is a job forked from the run's warm server (forgetmap.warm sets it in the child)


def pick_device(requested: str = "auto") -> torch.device:
    """`auto`: a GPU this job may use, else the CPU. A job whose `gpu` resource is 0 sees no GPU (the CLI
    hides them), so `auto` never lands on a device no lock or scheduler gave it."""
    import torch

    if requested == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif requested.startswith("cuda") and not torch.cuda.is_available():
        from .errors import ForgetmapError

        raise ForgetmapError(f"device {requested!r} requested, but no GPU is visible to this job: give its rule a "
                             f"`gpu` resource (models.<model>.resources.<stage>.gpu) or use device auto or cpu")
    else:
        device = torch.device(requested)
    say_device(device)
    return device


def say_device(device) -> None:
    """The job's device in its log: the card, or the CPU's model, and whether the job was forked from the run's
    warm process (a finished job's time is learned from only on the device it ran on: forgetmap.cost.learned)."""
    import logging

    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch

        named = f" ({torch.cuda.get_device_name(torch.device(device))})"
    else:  # (a job without torch, the CPU's: no import)
        from .devices import cpu_name

        named = f" ({cpu_name()})" if kind == "cpu" else ""
    logging.getLogger(__name__).info("device: %s%s%s", kind, named, WARM_NOTE if FORKED else "")


def pick_dtype(requested: str, device: torch.device) -> torch.dtype:
    """`auto` is bf16 on a GPU that supports it, fp32 otherwise."""
    import torch

    if requested == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[requested]


def pick_attention(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """flash_attention_2 on CUDA in half precision when flash-attn is installed and loads, else sdpa."""
    import torch

    if requested != "auto":
        return requested
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and flash_attn_usable():
        return "flash_attention_2"
    return "sdpa"


def flash_attn_usable() -> bool:
    """flash-attn is installed *and* loads: one built against another torch than the one installed (vLLM
    moves torch to its pin) is found by find_spec, then fails with an undefined symbol; sdpa then."""
    if importlib.util.find_spec("flash_attn") is None:
        return False
    try:
        import flash_attn  # noqa: F401
    except (ImportError, OSError) as exc:
        import logging

        logging.getLogger(__name__).warning("flash-attn is installed but does not load (%s): using sdpa; rebuild it "
                                            "against this torch: pip install --no-build-isolation flash-attn", exc)
        return False
    return True


def is_flash(model) -> bool:
    """Does the model run a flash-attention kernel (which takes no arbitrary 4D attention mask)?"""
    return "flash" in str(getattr(model.config, "_attn_implementation", "") or "")


def autocast_for(device: torch.device, bf16: bool = True):
    """bf16 autocast on a CUDA device that supports it (training's mixed precision, and any scoring of the
    model being trained: its weights stay fp32, and flash-attention takes only half precision); else none."""
    import torch

    from contextlib import nullcontext

    if device.type == "cuda" and bf16 and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def release_memory() -> None:
    """Give back what a finished stage of a job held on the GPU: its objects (a model with hooks sits in
    reference cycles that only the collector frees), then the blocks torch's caching allocator keeps. An
    engine started next in the same process (vLLM) measures the device's free memory and refuses to start
    below its memory fraction while they are held."""
    import torch

    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def read_pointer(model_dir: str | Path) -> dict | None:
    path = Path(model_dir) / POINTER
    return json.loads(path.read_text()) if path.exists() else None


def write_pointer(model_dir: str | Path, source: str, revision: str | None = None, **facts) -> None:
    """`base.json`: the model `source` names (with `local`, its directory, and `identity`, for a base)."""
    Path(model_dir).mkdir(parents=True, exist_ok=True)
    (Path(model_dir) / POINTER).write_text(json.dumps({"path": source, "revision": revision, **facts}, indent=1))


def model_source(model_dir: str | Path) -> tuple[str, dict]:
    """Where weights and tokenizer live: the directory itself, or the local files its pointer names (the
    directory planning found for a local path or a cached Hugging Face id: no hub lookups in jobs)."""
    pointer = read_pointer(model_dir)
    if pointer is not None and not (Path(model_dir) / "config.json").exists() \
            and not (Path(model_dir) / "adapter_config.json").exists():
        if pointer.get("local") and Path(pointer["local"]).is_dir():
            return pointer["local"], {"local_files_only": True}
        kwargs = {"revision": pointer["revision"]} if pointer.get("revision") else {}
        if Path(pointer["path"]).is_dir():
            kwargs["local_files_only"] = True
        return pointer["path"], kwargs
    return str(model_dir), {"local_files_only": True}


def load_tokenizer(model_dir: str | Path):
    """The model's tokenizer, checked usable; a pad token chosen where it has none (a padding token of
    its vocabulary, else EOS: padded positions are masked, so the choice never changes a number)."""
    from transformers import AutoTokenizer

    source, kwargs = model_source(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    check_tokenizer(tokenizer, source)
    pad_source = "tokenizer"
    if tokenizer.pad_token is None:
        vocab = tokenizer.get_vocab()
        candidate = next((t for t in PAD_CANDIDATES if t in vocab), None)
        tokenizer.pad_token = candidate or tokenizer.eos_token
        pad_source = "vocabulary" if candidate else "eos"
    tokenizer.forgetmap_pad_from = pad_source  # reported by tokenizer_choices; never saved with it
    return tokenizer


SAMPLE = "The quick brown fox jumps over the lazy dog, 42 times."


def check_tokenizer(tokenizer, source) -> None:
    """A usable tokenizer has an EOS and a real vocabulary. transformers silently builds a tokenizer of
    its special tokens alone for a directory without tokenizer files; that one encodes text to nothing."""
    from .errors import ForgetmapError

    if tokenizer.eos_token is None:
        raise ForgetmapError(f"{source}: the tokenizer has no EOS token; fine-tuning targets and scored spans "
                             f"end with it (set eos_token in its tokenizer_config.json)")
    ids = tokenizer(SAMPLE, add_special_tokens=False)["input_ids"]
    if len(tokenizer) <= len(set(tokenizer.all_special_tokens)) + 1 or not ids:
        raise ForgetmapError(f"{source}: no usable tokenizer ({len(tokenizer)} tokens, sample text encodes to "
                             f"{len(ids)}): the directory lacks tokenizer files (tokenizer.json, tokenizer.model "
                             f"or vocab.json); save them there with tokenizer.save_pretrained")


def tokenizer_choices(tokenizer, chat_template: str) -> dict:
    """What a job chose for the user: the pad token (and where it came from) and the chat template used."""
    from .data.chat import template_in_use

    return {"pad_token": tokenizer.pad_token, "pad_token_from": getattr(tokenizer, "forgetmap_pad_from", "tokenizer"),
            "chat_template": template_in_use(tokenizer, chat_template)}


def load_model(model_dir: str | Path, device: torch.device, dtype: torch.dtype, attention: str = "auto"):
    """Load a checkpoint, a LoRA adapter (merged into its base) or a base pointer, in eval mode."""
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    attn = pick_attention(attention, device, dtype)
    if (model_dir / "adapter_config.json").exists():
        from peft import PeftModel

        base = _load_base_for_adapter(model_dir, device, dtype, attention)
        with peft_quietly():
            model = PeftModel.from_pretrained(base, str(model_dir)).merge_and_unload()
    else:
        source, kwargs = model_source(model_dir)
        if device.type == "cuda":  # straight onto the GPU: never the whole model in host memory first
            kwargs["device_map"] = device
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn, **kwargs)
    return model.to(device).eval()


def save_model(model, into: str | Path) -> None:
    """`model.save_pretrained(into)`, without importing DeepSpeed where none of its engines can exist.

    transformers unwraps the model it saves through accelerate, which imports DeepSpeed wherever it is installed
    (the dev extra) only to ask whether the model is one of its engines: a second of start-up in every job that
    saves a checkpoint, and on a machine without a GPU its "Setting accelerator to CPU" warning in the job's log.
    A model is an engine only where DeepSpeed has been imported, so the question is skipped until it has."""
    import sys

    import accelerate.utils.other as unwrapping

    if "deepspeed" in sys.modules or not hasattr(unwrapping, "is_deepspeed_available"):
        model.save_pretrained(into)
        return
    from unittest import mock

    with mock.patch.object(unwrapping, "is_deepspeed_available", lambda: False):
        model.save_pretrained(into)


@contextmanager
def peft_quietly():
    """Around peft's wrapping of a model: peft asks `model.is_gradient_checkpointing`, which transformers
    >= 5.24 deprecates in favour of `is_activation_checkpointing` (a FutureWarning in every LoRA job that
    is peft's to change, not ours). Only that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def enable_checkpointing(model) -> None:
    """Non-reentrant gradient checkpointing, under the name this transformers gives it (from 5.2x
    `activation_checkpointing_enable`; the old name warns there that it goes in v6)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def widths(config) -> tuple[int, int, int, int, int]:
    """(hidden, heads, key-value heads, head dim, MLP width) of a text config (MLP width 0 where unnamed)."""
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return text.hidden_size, heads, kv_heads, head_dim, getattr(text, "intermediate_size", None) or 0


def cache_keyword(model) -> str:
    """The name of a model's key-value cache, as its `forward` takes it and its output returns it: `cache`
    from transformers 5.24 on (where `past_key_values` is deprecated), `past_key_values` before."""
    base = getattr(model, "_fsdp_wrapped_module", model)  # FSDP1's wrapper forwards whatever it is given
    base = base.get_base_model() if hasattr(base, "get_base_model") else base
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _load_base_for_adapter(adapter_dir: Path, device, dtype, attention):
    pointer = read_pointer(adapter_dir)
    if pointer is None:
        raise FileNotFoundError(f"{adapter_dir}: a LoRA adapter needs {POINTER} naming its base model")
    return load_model(pointer["path"], device, dtype, attention)


def train_demo_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on the demo's pretraining texts, with chat markers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|endoftext|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>",
                                   additional_special_tokens=["<|user|>", "<|assistant|>"])


def build_demo_model(tokenizer, architecture: dict, seed: int):
    """A small Llama-style causal LM with freshly initialised, seeded weights."""
    import torch

    from transformers import LlamaForCausalLM

    config = demo_config(len(tokenizer), architecture, tokenizer.pad_token_id, tokenizer.eos_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def demo_config(vocab_size: int, architecture: dict, pad_id: int | None = None, eos_id: int | None = None):
    """The demo base's Llama configuration (`models.NAME.base.architecture`)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=architecture["hidden_size"],
        intermediate_size=architecture["intermediate_size"], num_hidden_layers=architecture["layers"],
        num_attention_heads=architecture["heads"], num_key_value_heads=architecture["heads"],
        max_position_embeddings=architecture["max_position_embeddings"], tie_word_embeddings=True,
        pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=None, attn_implementation="sdpa")


def matching_modules(model, names: list[str]) -> dict[str, list[str]]:
    """For every configured module name, the qualified names of the modules it matches: the name itself or
    a name ending in "." + it (as peft matches LoRA's `target_modules`)."""
    return matching_names([n for n, _ in model.named_modules() if n], names)


def matching_names(qualified: list[str], names: list[str]) -> dict[str, list[str]]:
    """`matching_modules` over a model's qualified module names."""
    return {t: [n for n in qualified if n == t or n.endswith("." + t)] for t in names}


def module_names(model) -> list[str]:
    """The last components of the model's module names (for a message listing what a name could be)."""
    return short_names([n for n, _ in model.named_modules() if n])


def short_names(qualified: list[str]) -> list[str]:
    """`module_names` over a model's qualified module names."""
    return sorted({n.rsplit(".", 1)[-1] for n in qualified if not n.rsplit(".", 1)[-1].isdigit()})


def blocks(model):
    """The transformer's blocks, input end first (the longest module list of unsplittable layers): what layer
    freezing trains the top of (forgetmap.mitigation.freezing)."""
    import torch

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    kinds = set(getattr(inner, "_no_split_modules", None) or [])
    lists = [m for m in inner.modules() if isinstance(m, torch.nn.ModuleList) and len(m)
             and (type(m[0]).__name__ in kinds or not kinds)]
    if not lists:
        raise ValueError(f"{type(inner).__name__}: no list of transformer blocks found to freeze")
    return max(lists, key=len)


def n_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
