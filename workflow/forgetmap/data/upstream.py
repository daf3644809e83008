"""Upstream corpora: read and validate a corpus, list its example ids, cut it into scoring shards.

Shards are a deterministic function of the corpus's example ids and the shard size: shard k holds
examples [k * size, (k + 1) * size) in corpus order. Appending examples to a corpus adds shards and
leaves earlier full shards unchanged, so only new scoring jobs run. Example ids are stable: an
example whose text changes must get a new id.
"""

from __future__ import annotations

import hashlib

import pandas as pd
import pyarrow as pa

from ..errors import DataError
from ..io import write_table
from . import demo
from .tables import read_table, require_columns, require_text

COLUMNS = ["example_id", "source", "kind", "text", "prompt", "response"]
KINDS = ("lm", "chat")


def describe(spec: dict) -> str:
    return spec["path"] if spec["format"] != "demo" else f"demo corpus (seed {spec['seed']})"


def read_corpus(spec: dict) -> pd.DataFrame:
    """A user corpus file in the upstream contract, validated."""
    frame = read_table(spec["path"])
    validate(frame, spec["path"])
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    extra = [c for c in ("choices", "answer") if c in frame]
    return frame[COLUMNS + extra].reset_index(drop=True)


def validate(frame: pd.DataFrame, where: str) -> None:
    require_columns(frame, ["example_id", "source", "kind"], where)
    ids = frame["example_id"]
    if ids.isna().any():
        raise DataError(f"{where}: row {int(ids[ids.isna()].index[0])}, column 'example_id': missing id")
    dup = ids.duplicated(keep="first")
    if dup.any():
        row = int(dup[dup].index[0])
        first = int(ids[ids == ids[row]].index[0])
        raise DataError(f"{where}: row {row}, column 'example_id': duplicate id {ids[row]!r} "
                        f"(first at row {first})")
    bad_kind = ~frame["kind"].isin(KINDS)
    if bad_kind.any():
        row = int(bad_kind[bad_kind].index[0])
        raise DataError(f"{where}: row {row}, column 'kind': {frame['kind'][row]!r} is not one of "
                        f"{', '.join(KINDS)}")
    lm, chat = frame["kind"] == "lm", frame["kind"] == "chat"
    if lm.any():
        require_columns(frame, ["text"], where)
        require_text(frame, "text", where, lm)
    if chat.any():
        require_columns(frame, ["prompt", "response"], where)
        require_text(frame, "prompt", where, chat)
        require_text(frame, "response", where, chat)


def example_ids(spec: dict) -> list[str]:
    """The corpus's example ids in order, cheaply (no text is generated; parquet reads one column).

    Run at DAG-build time, so duplicate ids fail before any job starts.
    """
    if spec["format"] == "demo":
        return demo.upstream_ids(spec["n_examples"])
    frame = read_table(spec["path"], columns=["example_id"])
    require_columns(frame, ["example_id"], spec["path"])
    ids = frame["example_id"]
    dup = ids.duplicated()
    if dup.any():
        row = int(dup[dup].index[0])
        raise DataError(f"{spec['path']}: row {row}, column 'example_id': duplicate id {ids[row]!r}")
    return ids.astype(str).tolist()


def shard_plan(ids: list[str], shard_size: int) -> list[dict]:
    """Shard k: examples [k * size, (k + 1) * size), with a digest of their ids.

    The digest is a job parameter, so a shard's job reruns only when its examples change.
    """
    plan = []
    for first in range(0, max(1, len(ids)), shard_size):
        part = ids[first:first + shard_size]
        plan.append({"first": first, "count": len(part),
                     "digest": hashlib.sha256("\n".join(part).encode()).hexdigest()[:16]})
    return plan


def write_shard(spec: dict, first: int, count: int, out: str) -> int:
    """Write examples [first, first + count) of the corpus to `out`; returns their number."""
    if spec["format"] == "demo":
        part = demo.upstream_corpus(count, spec["seed"], first=first)
    else:
        corpus = read_corpus(spec)
        part = corpus.iloc[first:first + count]
    if len(part) != count or count == 0:
        raise DataError(f"{describe(spec)}: examples {first}..{first + count - 1} requested, "
                        f"{len(part)} found; the corpus changed since the workflow was planned, rerun it")
    table = pa.Table.from_pandas(part.reset_index(drop=True), preserve_index=False)
    write_table(table, out, {"first": first, "count": count})
    return len(part)
