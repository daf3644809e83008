"""OLMo-core (`ai2-olmo-core`) in a virtualenv of its own, made once and cached between runs: it pins
huggingface-hub < 2, rich < 14 and filelock < 4 (through cached-path), below what the project's environment
holds, so it cannot be installed beside it. The virtualenv sees the packages of the interpreter running the tests
(torch, transformers, forgetmap itself: its site directories added by a .pth file, after its own, so a virtualenv's
packages are seen where `--system-site-packages` would show its base interpreter's) and holds only OLMo-core and the
pins it needs over them (about 70 MB).

It lives under `$FORGETMAP_OLMO_CORE_ENV`, else `~/.cache/forgetmap/olmo-core-<version>`; where it cannot be made
`ensure` raises `Unavailable` with pip's own words."""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

from cached_env import Unavailable, ensure as ensure_env, location as env_location, pip, stamp

VERSION = "3.0.0"
__all__ = ["Unavailable", "ensure", "location"]


def location() -> Path:
    return env_location(f"olmo-core-{VERSION}", "FORGETMAP_OLMO_CORE_ENV")


def parent_sites() -> list[str]:
    """The site directories of the interpreter running the tests (a virtualenv's own, not its base's)."""
    return [path for path in site.getsitepackages() if Path(path).is_dir()]


def _make(python: Path, log) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(python.parents[1])], check=True)
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir, not a bare path: the parent's own .pth files (an editable forgetmap's among them) are read too
    lines = "".join(f"import site; site.addsitedir({path!r})\n" for path in parent_sites())
    (Path(own) / "forgetmap-parent-sites.pth").write_text(lines)
    pip(python, "install", f"ai2-olmo-core=={VERSION}", log=log)


def ensure() -> Path:
    """The environment's python (a minute the first time, then at once)."""
    import torch

    return ensure_env(location(), stamp(VERSION, torch.__version__, *parent_sites()), _make)
