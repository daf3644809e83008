"""Upstream corpora: read and validate a corpus, list its example ids, cut it into scoring shards.

Shards are a deterministic function of the corpus's example ids and the shard size: shard k holds
examples [k * size, (k + 1) * size) in corpus order. Appending examples to a corpus adds shards and
leaves earlier full shards unchanged, so only new scoring jobs run. Each shard's plan carries a digest
of its ids and, for a corpus file, of its examples' content: an example whose text changes under the
same id changes its shard's digest, so exactly that shard is rewritten and rescored, never served stale.
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


def content_hashes(spec: dict):
    """One 64-bit hash per example of a corpus file over every column that scoring reads; None for the
    demo corpus (its content is a function of its seed and ids)."""
    if spec["format"] == "demo":
        return None
    frame = read_table(spec["path"])
    columns = [c for c in COLUMNS + ["choices", "answer"] if c in frame]
    return pd.util.hash_pandas_object(frame[columns].astype(str), index=False).to_numpy()


def shard_plan(ids: list[str], shard_size: int, spec: dict | None = None) -> list[dict]:
    """Shard k: examples [k * size, (k + 1) * size), with a digest of their ids and content.

    The digest is a job parameter, so a shard's job reruns exactly when its examples change. An empty
    corpus is refused here, before any job runs."""
    if not ids:
        raise DataError(f"{describe(spec) if spec else 'the upstream corpus'}: no examples; an upstream corpus "
                        f"needs at least one")
    hashes = content_hashes(spec) if spec is not None else None
    plan = []
    for first in range(0, len(ids), shard_size):
        part = ids[first:first + shard_size]
        digest = hashlib.sha256("\n".join(part).encode())
        if hashes is not None:
            digest.update(hashes[first:first + shard_size].tobytes())
        plan.append({"first": first, "count": len(part), "digest": digest.hexdigest()[:16]})
    return plan


def shard_command(settings: dict, out: str) -> dict:
    """`forgetmap shard-upstream`: one shard of `shard_plan` (settings: corpus, first, count, digest)."""
    n = write_shard(settings["corpus"], settings["first"], settings["count"], out)
    return {"first": settings["first"], "examples": n}


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
