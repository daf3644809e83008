"""Readings of a model's architecture kept on disk, so that planning a run imports neither torch nor transformers.

Planning reads a base model's size and widths, its model type, positions, blocks and module names, and the bytes its
forward keeps per token (forgetmap.memory, forgetmap.anatomy): from a transformers config, a model built on the meta
device and tiny forwards. Importing torch and transformers for that was 10-13 s of the tiny config's 16 s dry run on
2 cores, paid again by every `snakemake -n`, every submission and every resumed run. A reading decorated `kept` is
made once and then read back from `$XDG_CACHE_HOME/forgetmap/architectures` (else `~/.cache/...`, or
`$FORGETMAP_ARCHITECTURES`), keyed by its arguments (JSON: the architecture as its config's JSON, the demo's
`architecture` block, a pretrained base's config.json text) and by what else decides it: the installed versions of
torch, transformers and accelerate, and forgetmap's source (a folder for each such installation; those of the
four that made a reading last are kept). A reading made again therefore gives the same value, and a changed library
or reader makes it again. A cache that cannot be read or written is passed over: the reading is made where it is
needed, as before.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "transformers", "accelerate")  # whose versions decide a reading
INSTALLATIONS = 4  # installations (versions and source) whose readings are kept; the others' are removed


def directory() -> Path:
    """Where readings are kept: `$FORGETMAP_ARCHITECTURES`, else the user's cache."""
    if os.environ.get("FORGETMAP_ARCHITECTURES"):
        return Path(os.environ["FORGETMAP_ARCHITECTURES"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forgetmap" / "architectures"


@functools.lru_cache(maxsize=1)
def stamp() -> str:
    """What decides every reading beside its arguments: the libraries' versions and forgetmap's own source, all of it
    (a reading runs through several modules: the memory traces through the scorer's, the generator's and the
    gradient projection's code), so that any change to the package makes every reading again."""
    digest = hashlib.sha256()
    for library in LIBRARIES:
        try:
            digest.update(f"{library}={metadata.version(library)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{library}=;".encode())
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def prune(root: Path, keep: int = INSTALLATIONS) -> None:
    """Only the readings of the `keep` installations that made one last stay (each installation's in a folder of
    its own, named for its stamp)."""
    import shutil

    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for folder in folders[keep:]:
        shutil.rmtree(folder, ignore_errors=True)


def kept(reading=None, *, keep=None):
    """`reading` made once per JSON arguments and installation, then read back from disk; its value is what JSON
    gives back (a tuple comes back a list) whether it was made now or read, so a run never depends on which.
    `keep`: whether a value just made is kept (`@kept(keep=...)`); one that is not is made again next time."""
    if reading is None:
        return functools.partial(kept, keep=keep)

    signature = inspect.signature(reading)

    @functools.wraps(reading)
    def read(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = json.dumps([reading.__module__, reading.__qualname__, bound.arguments], sort_keys=True)
        path = directory() / stamp()[:20] / \
            f"{reading.__name__.strip('_')}-{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        value = json.loads(json.dumps(reading(*bound.args, **bound.kwargs)))
        if keep is not None and not keep(value):
            return value
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            if not path.parent.is_dir():
                path.parent.mkdir(parents=True, exist_ok=True)
                prune(path.parent.parent)
            partial.write_text(json.dumps(value))
            os.replace(partial, path)  # whole or absent: two runs planning at once each write all of it
        except OSError:
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
        return value

    read.made = reading  # the reading itself, never kept (its tests)
    return read
