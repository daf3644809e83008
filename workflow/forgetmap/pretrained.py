"""A pretrained base model as the config names it: where its files are, what identifies them, and
whether its tokenizer and architecture can serve the run.

`base.path` is a local `save_pretrained` directory or a Hugging Face id. An id is looked up in the
local Hugging Face cache only (never the network): `hf download ID` (or any earlier
`from_pretrained`) puts it there. A model that cannot be found fails at planning, naming the key,
instead of every job spending its hub retries.

The model's *identity* is a digest of its config, tokenizer and other small files by content, and of
its weight files by size and sampled content: the first MiB (a safetensors header and the first tensors)
and 64 evenly spaced 64 KiB blocks, about 5 MiB read per file whatever its size. A checkpoint retrained
to the same shape (continued pretraining saved over the old one) differs in every sampled block; a copy
of the same weights (a new modification time) keeps its identity. It is part of the base job's settings,
so replacing the weights or the tokenizer under the same path reruns the base pointer and, after it,
every fine-tune and score that depends on it.

Importing this module is cheap (no torch): the Snakefile's planning uses it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt", ".onnx")
LARGE = 64 * 2**20  # other files above this size are sampled too
HEAD = 2**20  # bytes read from the start of a sampled file
BLOCK = 64 * 2**10  # bytes of each sampled block
SAMPLES = 64  # blocks read per sampled file, evenly spaced after the head
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json", "spiece.model")


def looks_local(path: str) -> bool:
    """A path rather than a hub id: it exists, or is written as a path (absolute, ./, ../, ~)."""
    return Path(path).expanduser().exists() or path.startswith(("/", ".", "~"))


def locate(path: str, revision: str | None) -> Path:
    """The local directory holding the model `path` names (a directory, or an id in the HF cache); a
    FileNotFoundError says what is missing and how to make it available."""
    if looks_local(path):
        from .from_gguf import refusal

        directory = Path(path).expanduser()
        why = refusal(path)
        if why:
            raise FileNotFoundError(why)
        if not directory.is_dir():
            raise FileNotFoundError(f"{path!r} is not a directory")
        if not (directory / "config.json").exists():
            raise FileNotFoundError(f"{path!r} has no config.json (a `save_pretrained` model directory is expected)")
        return directory.resolve()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        directory = Path(snapshot_download(path, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as exc:
        at = f" at revision {revision!r}" if revision else ""
        raise FileNotFoundError(
            f"the Hugging Face model {path!r}{at} is not in the local cache, and forgetmap never "
            f"downloads (each job would otherwise spend its hub retries, then fail). Make it available with "
            f"`hf download {path}{' --revision ' + revision if revision else ''}` on a machine that has network access "
            f"(HF_HOME / HF_HUB_CACHE shared with the jobs), or give a local model directory instead "
            f"({type(exc).__name__})") from None
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"the cached {path!r} ({directory}) has no config.json")
    return directory


def identity(directory: Path) -> str:
    """A digest of a model directory: small files by content, weights (and large files) by size and
    sampled content (`sampled`)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith(".")):
        size = file.stat().st_size
        digest.update(file.name.encode() + b"\0")
        if file.suffix in WEIGHT_SUFFIXES or size > LARGE:
            digest.update(f"size={size}".encode())
            digest.update(sampled(file, size))
        else:
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def sampled(file: Path, size: int) -> bytes:
    """A digest of a file's first `HEAD` bytes and `SAMPLES` evenly spaced blocks of `BLOCK` bytes after
    them (the whole file when it is smaller than what they would read)."""
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        if size <= HEAD + SAMPLES * BLOCK:
            digest.update(handle.read())
            return digest.digest()
        digest.update(handle.read(HEAD))
        span = size - HEAD - BLOCK  # the last block ends at the end of the file
        for k in range(SAMPLES):
            handle.seek(HEAD + span * k // (SAMPLES - 1))
            digest.update(handle.read(BLOCK))
    return digest.digest()


def has_tokenizer_files(directory: Path) -> bool:
    return any((Path(directory) / name).exists() for name in TOKENIZER_FILES)


def target_modules_missing(directory: Path, targets: list[str]) -> tuple[list[str], list[str]]:
    """LoRA `target_modules` that match no module of the architecture (built on the meta device from its
    config: no weights are read), and the linear layers' names that would match, for the message."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .models import matching_modules

    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and name})
    if targets in ("all-linear", ["all-linear"]):
        return [], linear
    missing = [t for t, found in matching_modules(model, targets).items() if not found]
    return missing, linear


def tokenizer_identity(directory: Path) -> str | None:
    """A digest of what splits text into tokens: the vocabulary and merges (tokenizer.json's model,
    normalizer and pre-tokenizer, or the vocabulary files), not the chat template or the special tokens a
    post-trained model adds around them. None where the directory has no tokenizer files."""
    import json

    directory = Path(directory)
    digest = hashlib.sha256()
    fast = directory / "tokenizer.json"
    if fast.exists():
        spec = json.loads(fast.read_text())
        digest.update(json.dumps([spec.get(k) for k in ("model", "normalizer", "pre_tokenizer")],
                                 sort_keys=True).encode())
        return digest.hexdigest()[:16]
    files = [directory / n for n in ("vocab.json", "merges.txt", "tokenizer.model", "spiece.model", "vocab.txt")]
    present = [f for f in files if f.exists()]
    if not present:
        return None
    for file in present:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def has_chat_template(directory: Path) -> bool:
    """Does the tokenizer carry a chat template (in tokenizer_config.json, or beside it as transformers 5
    saves it: chat_template.jinja / chat_template.json)?"""
    import json

    directory = Path(directory)
    if (directory / "chat_template.jinja").exists() or (directory / "chat_template.json").exists():
        return True
    config = directory / "tokenizer_config.json"
    return config.exists() and bool(json.loads(config.read_text()).get("chat_template"))
