"""OLMo-core (`ai2-olmo-core`) in a virtualenv of its own, made once and cached between runs: it pins
huggingface-hub < 2, rich < 14 and filelock < 4 (through cached-path), below what the project's environment
holds, so it cannot be installed beside it. Transformers 5.25 needs huggingface-hub >= 2.4, so the virtualenv also
holds the newest transformers that works with OLMo-core's pins, resolved by pip beside it (5.24.0 with
huggingface-hub 1.33.0 on 2026-12-07), and is made again when the project's transformers or huggingface-hub
changes, or a week on. The virtualenv sees the packages of the interpreter running the tests
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

from cached_env import Unavailable, ensure as ensure_env, location as env_location, pip, stamp, versions

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
    # transformers asked for beside it: pip resolves one that works with OLMo-core's huggingface-hub (the project's own
    # newest may not: it is shadowed here by the virtualenv's own)
    pip(python, "install", f"ai2-olmo-core=={VERSION}", "transformers>=4.56", log=log)
    check = subprocess.run([str(python), "-c", "import transformers, olmo_core; print(transformers.__version__)"],
                           capture_output=True, text=True)
    if check.returncode:
        raise Unavailable(f"OLMo-core {VERSION} and transformers do not import together: {check.stderr[-1500:]}")
    print(f"transformers {check.stdout.strip()} beside OLMo-core {VERSION}", file=log)


def ensure() -> Path:
    """The environment's python (a minute the first time, then at once)."""
    import torch

    return ensure_env(location(), stamp(VERSION, torch.__version__, *versions("transformers", "huggingface-hub"),
                                        *parent_sites()), _make)
