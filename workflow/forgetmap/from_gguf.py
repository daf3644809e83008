"""A GGUF file (llama.cpp's format) made into a model directory forgetmap can use as a pretrained base.

transformers reads a GGUF file (with the `gguf` package) and dequantizes its weights, but refuses to save a model
loaded that way ("quantized with gguf"), and every job would dequantize it again. `convert` loads it once, builds
the same architecture from its config without the GGUF quantization record, loads the dequantized weights into it
(every key must match) and saves model, tokenizer and generation config with `save_pretrained`: a directory any job
reads as it reads a hub model's. Dequantized weights are not the original weights: a Q4 file's model is the
original's approximation, fine for real tokenizers, templates and real forgetting, not for claims about the model
it was quantized from.

    forgetmap from-gguf SmolLM2-135M-Instruct.Q4_1.gguf --out models/smollm2-135m-instruct
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from .errors import UsageError

log = logging.getLogger(__name__)
HOW = "forgetmap from-gguf FILE.gguf --out DIRECTORY"  # what a config naming a GGUF file is told to run


def gguf_files(path: str) -> list[Path]:
    """The GGUF files a base path names: the file itself, or those in a directory without config.json."""
    target = Path(path).expanduser()
    if target.is_file() and target.suffix == ".gguf":
        return [target]
    if target.is_dir() and not (target / "config.json").exists():
        return sorted(target.glob("*.gguf"))
    return []


def refusal(path: str) -> str | None:
    """Why `path` cannot be a base or a checkpoint as it is, and how to convert it (None where it names no GGUF
    file). Cheap: planning asks it of every local model path."""
    found = gguf_files(path)
    if not found:
        return None
    what = "a GGUF file" if len(found) == 1 else "GGUF files"
    command = HOW.replace("FILE.gguf", str(found[0]))
    return (f"{path!r} is {what} ({', '.join(f.name for f in found)}), not a `save_pretrained` model directory; "
            f"convert it once with `{command}` (pip install gguf) and give that directory")


def convert(gguf_file: str | Path, out: str | Path, dtype: str = "float32") -> Path:
    """Dequantize `gguf_file` into a `save_pretrained` directory at `out` (written whole, then renamed)."""
    try:
        import gguf  # noqa: F401  transformers' reader needs it; its own error names no package to install
    except ImportError:
        raise UsageError("reading a GGUF file needs the `gguf` package: pip install gguf") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from .io import atomic_path

    source, out = Path(gguf_file).expanduser().resolve(), Path(out)
    if not source.is_file():
        raise UsageError(f"{source}: no such GGUF file")
    hf_logging.disable_progress_bar()
    kwargs = {"gguf_file": source.name}
    with _quiet_tqdm():  # transformers' GGUF reader draws a bar of its own, hf's switch or not
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), **kwargs)
        quantized = AutoModelForCausalLM.from_pretrained(str(source.parent), dtype=getattr(torch, dtype), **kwargs)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the GGUF record that makes save_pretrained refuse
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.generation_config = quantized.generation_config
    with atomic_path(out, directory=True) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    log.info("%s: %s, %.1fM parameters, dequantized to %s in %s", source.name, type(model).__name__,
             sum(p.numel() for p in model.parameters()) / 1e6, dtype, out)
    return out


@contextmanager
def _quiet_tqdm():
    from functools import partialmethod

    from tqdm import tqdm

    init = tqdm.__init__
    tqdm.__init__ = partialmethod(init, disable=True)
    try:
        yield
    finally:
        tqdm.__init__ = init


def convert_command(gguf_file: str, out: str, dtype: str) -> None:
    """`forgetmap from-gguf`."""
    convert(gguf_file, out, dtype)
