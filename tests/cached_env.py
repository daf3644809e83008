"""A virtualenv of a test's own, made once and cached between runs, for a package whose pins cannot share the
project's environment (vLLM's CPU build: tests/vllm_env.py; OLMo-core: tests/olmocore_env.py), or another directory
made once (the real model: tests/smollm2.py). `ensure` makes or
refreshes it under a lock (parallel test sessions wait for one maker) and stamps what it was made for; where it
cannot be made (no package index, an unsupported platform) it raises `Unavailable` with pip's own words."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
# what the package index serves changes under an environment's unpinned dependencies: one made longer ago than this
# is made again, so a week's new releases that break a tier show in CI within a week
FRESH_DAYS = 7


class Unavailable(RuntimeError):
    """The environment could not be made here; the message says why."""


def location(name: str, variable: str) -> Path:
    """`$variable`, else `~/.cache/forgetmap/name`."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forgetmap" / name
    return Path(os.environ.get(variable) or default)


def stamp(*parts: str) -> str:
    """What an environment is made for: its own versions, this checkout and its dependency list."""
    pyproject = (REPO / "pyproject.toml").read_text()
    return hashlib.sha256(f"{' '.join(parts)} {REPO}\n{pyproject}".encode()).hexdigest()[:16]


def versions(*names: str) -> list[str]:
    """`name==version` of each package the interpreter running the tests holds (a stamp's parts: a tier that sees
    them is made again when one changes)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}==none")
    return out


def pip(python: Path, *args: str, log) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], stdout=log,
                          stderr=subprocess.STDOUT, text=True, timeout=3600)
    if proc.returncode:
        log.flush()
        tail = "".join(Path(log.name).read_text().splitlines(keepends=True)[-15:])
        raise Unavailable(f"pip {' '.join(args[:3])}... failed ({proc.returncode}); its last lines:\n{tail}")


def python_or_skip(environment, what: str) -> Path:
    """`environment.ensure()` (a module of this kind: vllm_env, olmocore_env), or the test skipped, saying why."""
    import pytest

    try:
        return environment.ensure()
    except Unavailable as exc:
        pytest.skip(f"{what} could not be installed in {environment.location()}: {exc}")


def prepared(directory: Path, wanted: str, make: Callable[[Path, object], None]) -> Path:
    """`directory`, made (`make(directory, log)`) or refreshed as needed under a lock, stamped `wanted`."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = directory / "forgetmap-ready"
        if ready.exists() and ready.read_text() == wanted and time.time() - ready.stat().st_mtime < FRESH_DAYS * 86400:
            return directory
        with open(directory.parent / f"{directory.name}.install.log", "w") as log:
            make(directory, log)
        ready.write_text(wanted)
    return directory


def ensure(env: Path, wanted: str, make: Callable[[Path, object], None]) -> Path:
    """The environment's python, made (`make(python, log)`) or refreshed as needed, stamped `wanted`."""
    return prepared(env, wanted, lambda directory, log: make(directory / "bin" / "python", log)) / "bin" / "python"
