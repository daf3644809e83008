"""Whole-or-nothing output files: write beside the target, then rename."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@contextmanager
def atomic_path(target: str | os.PathLike, directory: bool = False):
    """Yield a temporary path next to `target`; on success rename it onto `target`, else delete it."""
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
        if directory and target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


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
