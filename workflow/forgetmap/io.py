"""Whole-or-nothing output files: write beside the target, then rename, readable as the umask says."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def umask() -> int:
    """The process's umask (read by setting it and putting it back: there is no other portable way)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(target: str | os.PathLike, directory: bool = False):
    """Yield a temporary path next to `target`; on success rename it onto `target`, else delete it. The
    target (a directory: with everything in it) gets the mode a plain `open` or `mkdir` would give it (the
    temporary one is private: 0600/0700), so a lab's group reads the results when its umask lets it."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        _plain_modes(tmp)
        if directory and target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def _plain_modes(path: Path) -> None:
    """The modes `open` and `mkdir` give under the umask, on `path` and everything inside it (the temporary
    name is private, and so is what some writers create: transformers saves weights through a temporary
    file of its own)."""
    mask = umask()
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
    if path.is_dir():
        for root, directories, files in os.walk(path):
            for name in directories:
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
            for name in files:
                os.chmod(os.path.join(root, name), 0o666 & ~mask)


def definition_key(definition: dict) -> str:
    """8 hex digits of the settings that define a file (sorted JSON, so key order and the config file it came from
    do not matter): a data file's `{key}` (forgetmap.plan.paths), a score file's settings."""
    import hashlib

    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def write_table(table: pa.Table, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write a parquet file atomically; `metadata` is stored as JSON under the key `forgetmap`."""
    if metadata is not None:
        existing = dict(table.schema.metadata or {})
        existing[b"forgetmap"] = json.dumps(metadata).encode()
        table = table.replace_schema_metadata(existing)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_metadata(path: str | os.PathLike) -> dict:
    """The `forgetmap` JSON metadata of a parquet file written by `write_table` ({} if none)."""
    raw = (pq.read_schema(path).metadata or {}).get(b"forgetmap")
    return json.loads(raw) if raw else {}
