"""Upstream corpora: read and validate a corpus, list its example ids, cut it into scoring shards.

Items that carry an `answer` are also scored for correctness (`forgetmap.correctness`): with `choices`
(a list of at least 2 strings, the answer among them) as multiple choice, without as free form (short
answer). Their context is the `prompt`: the chat prompt for `chat` items, the text before the answer for
`lm` items.

Shards are a deterministic function of the corpus's example ids and the shard size: shard k holds
examples [k * size, (k + 1) * size) in corpus order. Appending examples to a corpus adds shards and
leaves earlier full shards unchanged, so only new scoring jobs run. Each shard's plan carries a digest
of its ids and, for a corpus file, of its examples' content: an example whose text changes under the
same id changes its shard's digest, so exactly that shard is rewritten and rescored, never served stale.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DataError
from ..io import write_table
from . import demo
from .tables import read_table, require_columns, require_text

COLUMNS = ["example_id", "source", "kind", "text", "prompt", "response"]
KINDS = ("lm", "chat")


def describe(spec: dict) -> str:
    if spec["format"] == "hf":
        from . import hf

        return hf.describe(spec)
    return spec["path"] if spec["format"] != "demo" else f"demo corpus (seed {spec['seed']})"


def _table(spec: dict, columns: list[str] | None = None) -> pd.DataFrame:
    """The corpus's rows as stored: a file, or a Hugging Face dataset mapped to the contract's columns
    (`kind` and `source` constants where it has no such column; ids by position where it has none), or
    several (`parts`: each a dataset of its own, e.g. MMLU, ARC and GSM8K, one after the other)."""
    if spec["format"] != "hf":
        return read_table(spec["path"], columns=columns)
    if spec.get("parts"):
        shared = {k: v for k, v in spec.items() if k != "parts"}
        frames = [_table({**shared, **part, "id_prefix": _part_prefix(part)}, columns) for part in spec["parts"]]
        return pd.concat(frames, ignore_index=True)
    from . import hf

    frame, _ = hf.frame(spec, [*COLUMNS, "choices", "answer"])
    name = spec.get("id_prefix") or _dataset_name(spec)
    if "kind" not in frame:
        frame["kind"] = spec.get("kind") or "lm"
    if "response" not in frame and "answer" in frame:  # an item's scored response is its answer (MMLU)
        frame["response"] = frame["answer"]
    if "source" not in frame:
        frame["source"] = spec.get("source") or name
    if "example_id" not in frame:
        frame.insert(0, "example_id", [f"{name}-{i}" for i in range(len(frame))])
    frame["example_id"] = frame["example_id"].astype(str)
    return frame if columns is None else frame[[c for c in columns if c in frame]]


def _dataset_name(spec: dict) -> str:
    """The last component of a dataset's id or path: the prefix of ids made by position."""
    return spec["dataset"].rstrip("/").rsplit("/", 1)[-1]


def _part_prefix(part: dict) -> str:
    """The id prefix of a part's rows (when it has no id column): its source label, else its dataset and
    configuration (two BBH configurations of one dataset never share ids)."""
    if part.get("source"):
        return part["source"]
    return f"{_dataset_name(part)}-{part['name']}" if part.get("name") else _dataset_name(part)


def read_corpus(spec: dict) -> pd.DataFrame:
    """A user corpus (a file, or a Hugging Face dataset) in the upstream contract, validated."""
    frame = _table(spec)
    validate(frame, describe(spec))
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
    validate_items(frame, where)


def present(value) -> bool:
    """A cell that holds a value (not None, not a float NaN as pandas reads a missing cell)."""
    return value is not None and not (isinstance(value, float) and value != value)


def validate_items(frame: pd.DataFrame, where: str) -> None:
    """Scorable items: a non-empty `answer`; `choices` a list of >= 2 strings holding the answer; a
    `prompt` to condition on."""
    if "choices" in frame and "answer" not in frame:
        raise DataError(f"{where}: column 'choices' needs a column 'answer' (the correct choice)")
    if "answer" not in frame:
        return
    choices = frame["choices"] if "choices" in frame else pd.Series([None] * len(frame), index=frame.index)
    for row, (answer, options) in enumerate(zip(frame["answer"], choices)):
        if not present(answer):
            if present(options) and not (hasattr(options, "__len__") and len(options) == 0):
                raise DataError(f"{where}: row {row}, column 'answer': missing, but the row has choices")
            continue
        if not isinstance(answer, str) or not answer.strip():
            raise DataError(f"{where}: row {row}, column 'answer': empty answer; a scorable item needs one "
                            f"(leave the cell null for an item that is not scored)")
        if not present(options):
            continue
        if isinstance(options, str) or not hasattr(options, "__len__"):
            raise DataError(f"{where}: row {row}, column 'choices': {type(options).__name__} {options!r} is not "
                            f"a list of options")
        options = list(options)
        if len(options) < 2:
            raise DataError(f"{where}: row {row}, column 'choices': {len(options)} option(s); multiple choice "
                            f"needs at least 2")
        if not all(isinstance(o, str) and o.strip() for o in options):
            raise DataError(f"{where}: row {row}, column 'choices': every option must be non-empty text")
        if len(set(options)) != len(options):
            repeated = next(o for o in options if options.count(o) > 1)
            raise DataError(f"{where}: row {row}, column 'choices': option {repeated!r} is listed twice; an item's "
                            f"options must differ (its margin and acc would compare an option with itself)")
        if answer not in options:
            raise DataError(f"{where}: row {row}, column 'answer': {answer!r} is not one of its choices "
                            f"{options!r}")
    scorable = frame["answer"].map(present)
    if scorable.any():
        require_columns(frame, ["prompt"], where)
        require_text(frame, "prompt", where, scorable)


def scorable(frame: pd.DataFrame) -> np.ndarray:
    """Row positions of the items scored for correctness (those with an answer)."""
    if "answer" not in frame:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(frame["answer"].map(present).to_numpy(bool))


def has_items(spec: dict) -> bool:
    """Does the corpus hold items scored for correctness? (Read at planning: only the `answer` column.)"""
    if spec["format"] == "demo":  # domains cycle: the first len(DOMAINS) examples show every one there is
        first = range(min(spec["n_examples"], len(demo.DOMAINS)))
        return any(demo.upstream_domain(i) in demo.ITEM_DOMAINS for i in first)
    if spec["format"] != "hf" and str(spec["path"]).endswith(".parquet"):
        import pyarrow.parquet as pq

        if "answer" not in pq.read_schema(spec["path"]).names:
            return False
    return bool(answered(_table(spec, columns=["answer"])).any())


def item_flags(spec: dict) -> list[bool]:
    """Whether each example of the corpus, in order, is an item with an answer (read at planning: the demo's
    domains, or the `answer` column)."""
    if spec["format"] == "demo":
        return [demo.upstream_domain(i) in demo.ITEM_DOMAINS for i in range(spec["n_examples"])]
    return answered(_table(spec, columns=["answer"])).tolist()


def answered(frame: pd.DataFrame) -> np.ndarray:
    """(rows,) bool: which rows of a corpus are items with an answer (validate_items refuses an empty one)."""
    if "answer" not in frame:
        return np.zeros(len(frame), dtype=bool)
    return frame["answer"].map(present).to_numpy(dtype=bool)


def example_ids(spec: dict) -> list[str]:
    """The corpus's example ids in order, cheaply (no text is generated; parquet reads one column).

    Run at DAG-build time, so duplicate ids fail before any job starts.
    """
    if spec["format"] == "demo":
        return demo.upstream_ids(spec["n_examples"])
    frame = _table(spec, columns=["example_id"])
    require_columns(frame, ["example_id"], describe(spec))
    ids = frame["example_id"]
    dup = ids.duplicated()
    if dup.any():
        row = int(dup[dup].index[0])
        raise DataError(f"{describe(spec)}: row {row}, column 'example_id': duplicate id {ids[row]!r}")
    return ids.astype(str).tolist()


def content_hashes(spec: dict):
    """One 64-bit hash per example of a corpus file over every column that scoring reads; None for the
    demo corpus (its content is a function of its seed and ids)."""
    if spec["format"] == "demo":
        return None
    frame = _table(spec)
    validate(frame, describe(spec))  # planning time: a bad row (an item, a chat row without a response) fails before any job
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


def planned_shard(settings: dict) -> pd.DataFrame:
    """The examples a shard job with these settings (`shard_plan`'s, with the corpus) writes."""
    spec, first, count = settings["corpus"], settings["first"], settings["count"]
    if spec["format"] == "demo":
        return demo.upstream_corpus(count, spec["seed"], first=first)
    return read_corpus(spec).iloc[first:first + count]


def write_shard(spec: dict, first: int, count: int, out: str) -> int:
    """Write examples [first, first + count) of the corpus to `out`; returns their number."""
    part = planned_shard({"corpus": spec, "first": first, "count": count})
    if len(part) != count or count == 0:
        raise DataError(f"{describe(spec)}: examples {first}..{first + count - 1} requested, "
                        f"{len(part)} found; the corpus changed since the workflow was planned, rerun it")
    table = pa.Table.from_pandas(part.reset_index(drop=True), preserve_index=False)
    write_table(table, out, {"first": first, "count": count})
    return len(part)


def read_ids(shards: list[str]) -> np.ndarray:
    """The upstream example ids in corpus order, reading only that column of each shard."""
    import pyarrow.parquet as pq

    return np.concatenate([pq.read_table(p, columns=["example_id"]).column(0).to_numpy().astype(str) for p in shards])


def read_rows(shards: list[str], indices: np.ndarray):
    """The upstream examples at corpus `indices`, in that order, reading only the shards that hold them."""
    import pandas as pd
    import pyarrow.parquet as pq

    indices = np.asarray(indices, dtype=np.int64)
    parts, order, first = [], [], 0
    for path in shards:
        count = pq.ParquetFile(path).metadata.num_rows
        inside = np.flatnonzero((indices >= first) & (indices < first + count))  # positions in `indices`
        if len(inside):
            parts.append(pd.read_parquet(path).iloc[indices[inside] - first])
            order.append(inside)
        first += count
    if not parts:
        raise IndexError(f"no upstream example at indices {indices[:5].tolist()}")
    frame = pd.concat(parts, ignore_index=True)
    return frame.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)
