"""Axolotl in a virtualenv of its own, made once and cached between runs: Axolotl 0.19 pins its own transformers
(5.16.1), TRL (1.9.0), peft, datasets, huggingface-hub (1.17.0), lm-eval (0.4.11) and packaging (26.0), below or
beside what the project's environment holds, so it cannot be installed beside it. The virtualenv holds torch
2.13.0 (CPU), Axolotl with every requirement it declares (its GPU kernels and cloud clients too, as a user's
`pip install axolotl` brings them: 3.7 GB, four minutes to make here, each module compiled when it is first
imported: 50 s of the first run), and forgetmap from this checkout (editable) with its dependencies but
Snakemake, whose packaging < 26 Axolotl's pin refuses: the monitor is the library, not the workflow.

It lives under `$FORGETMAP_AXOLOTL_ENV`, else `~/.cache/forgetmap/axolotl-<version>`; where it cannot be made
`ensure` raises `Unavailable` with pip's own words."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip's own copy of the same reader
    from pip._vendor import tomli as tomllib

from cached_env import REPO, Unavailable, ensure as ensure_env, location as env_location, pip, stamp

VERSION = "0.19.0"
TORCH = "2.13.0"
# what pip's resolver settles on for Axolotl 0.19.0's extras-of-dependencies, named so that it does not download
# every gradio, pydantic and fsspec release on its way down to them (about twenty 30 MB gradio wheels otherwise)
STEERED = ("gradio[oauth]==6.10.0", "pydantic[email]==2.12.5", "fsspec[http]==2025.10.0", "fastapi==0.163.2",
           "anyio==4.14.2", "transformers[sentencepiece]==5.16.1")
WORKFLOW_ONLY = ("snakemake",)  # forgetmap's dependencies the monitor never imports
__all__ = ["Unavailable", "ensure", "location"]


def location() -> Path:
    return env_location(f"axolotl-{VERSION}", "FORGETMAP_AXOLOTL_ENV")


def library_dependencies() -> list[str]:
    """forgetmap's declared dependencies but the workflow's own (pyproject.toml)."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in declared if re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() not in WORKFLOW_ONLY]


def _make(python: Path, log) -> None:
    env = python.parents[1]
    if not (env / "axolotl-installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        pip(python, "install", "--no-compile", f"torch=={TORCH}", f"axolotl=={VERSION}", *STEERED, log=log)
        (env / "axolotl-installed").write_text(VERSION)
    pip(python, "install", "--no-deps", "-e", str(REPO), log=log)
    pip(python, "install", *library_dependencies(), log=log)  # Axolotl's pins satisfy most: kept


def ensure() -> Path:
    """The environment's python (minutes the first time, then at once)."""
    return ensure_env(location(), stamp(VERSION, TORCH), _make)
