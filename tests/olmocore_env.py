"""OLMo-core (`ai2-olmo-core`) in a virtualenv of its own, made once and cached between runs: it pins
huggingface-hub < 2, rich < 14 and filelock < 4 (through cached-path), below what the project's environment
holds, so it cannot be installed beside it. The virtualenv sees the project's packages (`--system-site-packages`:
torch, transformers, forgetmap itself) and holds only OLMo-core and the pins it needs over them (about 70 MB).

It lives under `$FORGETMAP_OLMO_CORE_ENV`, else `~/.cache/forgetmap/olmo-core-<version>`; where it cannot be made
`ensure` raises `Unavailable` with pip's own words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cached_env import Unavailable, ensure as ensure_env, location as env_location, pip, stamp

VERSION = "3.0.0"
__all__ = ["Unavailable", "ensure", "location"]


def location() -> Path:
    return env_location(f"olmo-core-{VERSION}", "FORGETMAP_OLMO_CORE_ENV")


def _make(python: Path, log) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(python.parents[1])],
                   check=True)
    pip(python, "install", f"ai2-olmo-core=={VERSION}", log=log)


def ensure() -> Path:
    """The environment's python (a minute the first time, then at once)."""
    import torch

    return ensure_env(location(), stamp(VERSION, torch.__version__), _make)
