"""A fractional map's scoring job: the cells of one run's shard that it measures (forgetmap.fractional.row, and
every item with an answer, whose correctness is Y's and is never completed), of them those an earlier score file
of the run already holds read again, and the rest scored.

The file keeps the scores contract row for row with the shard (every example id in order), so the matrix, the
correctness tables and every other reader align it as a full file; a cell not measured has a NaN `nll`, 0 tokens
and 0 bytes, and the column `scored` says which were measured. An earlier file is read again only where it was
made from the same checkpoint (its identity), with the same scoring settings and of the same shard (its name
holds its definition's key): a larger fraction scores only its new cells, a smaller one or another design none
that any file holds.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

SCORED = "scored"  # the column of a fractional score file that says which examples it measured


def measured_rows(frame, cells: dict) -> np.ndarray:
    """(rows,) bool: the shard's examples the run's cells hold (its items too, where `cells['items']`)."""
    from .data.upstream import answered
    from .fractional import row

    wanted = row(cells["design"], cells["fraction"], cells["task"], cells["place"],
                 frame["example_id"].astype(str).tolist(), cells["seed"])
    return wanted | answered(frame) if cells["items"] else wanted


def earlier_files(out: str, metadata: dict) -> list:
    """The run's other score files of the same shard that may be read again (module docstring), largest first."""
    import pyarrow.parquet as pq

    from .io import read_metadata

    out = Path(out)
    stem = out.name.split(".")[0]  # shard-K
    found = []
    for path in sorted(out.parent.glob(f"{stem}.*parquet")):
        if path.resolve() == out.resolve() or not path.name.endswith(".parquet"):
            continue
        try:
            meta = read_metadata(path)
        except OSError:  # a file being written, or not a parquet file
            continue
        if all(meta.get(k) == metadata[k] for k in ("identity", "settings", "shard")):
            found.append(pq.read_table(path))
    return sorted(found, key=lambda t: -_measured(t).sum())


def _measured(table) -> np.ndarray:
    if SCORED in table.column_names:
        return table.column(SCORED).to_numpy(zero_copy_only=False).astype(bool)
    return np.ones(table.num_rows, dtype=bool)


def score_cells(frame, settings: dict, out: str, metadata: dict, score) -> dict:
    """Write the run's score file of the shard `frame` holding its cells: those earlier files hold, read again, and
    the others scored by `score(frame part) -> (table, summary)` (forgetmap.score.score_frame)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .io import write_table

    ids = frame["example_id"].astype(str).to_numpy()
    wanted = measured_rows(frame, settings["cells"])
    source = np.full(len(frame), -1)  # each wanted example's earlier file, -1: scored now
    earlier = earlier_files(out, metadata)
    positions = [{e: i for i, e in enumerate(table.column("example_id").to_pylist())} for table in earlier]
    for k, (table, position) in enumerate(zip(earlier, positions)):
        held = _measured(table)
        for r in np.flatnonzero(wanted & (source < 0)):
            i = position.get(ids[r])
            if i is not None and held[i]:
                source[r] = k
    todo = np.flatnonzero(wanted & (source < 0))
    parts, order, summary = [], [], {"examples": int(len(frame))}
    if len(todo):
        table, summary = score(frame.iloc[todo].reset_index(drop=True))
        parts.append(table)
        order.append(todo)
    for k, (table, position) in enumerate(zip(earlier, positions)):
        rows = np.flatnonzero(source == k)
        if len(rows):
            parts.append(table.take(pa.array([position[ids[r]] for r in rows])))
            order.append(rows)
    if parts:
        names = [c for c in parts[0].column_names if c != SCORED]  # written again below, from `wanted`
        schema = parts[0].select(names).schema.remove_metadata()  # a file read back may hold string, not large_string
        combined = pa.concat_tables([p.select(names).replace_schema_metadata(None).cast(schema) for p in parts])
        at = np.full(len(frame), -1)
        at[np.concatenate(order)] = np.arange(combined.num_rows)
        full = combined.take(pa.array(at, mask=at < 0))
    else:  # nothing wanted in this shard (a small shard at a small fraction)
        full = pa.table({"example_id": pa.array([None] * len(frame), pa.string()),
                         "nll": pa.array([None] * len(frame), pa.float32()),
                         "n_tokens": pa.array([None] * len(frame), pa.int32()),
                         "n_bytes": pa.array([None] * len(frame), pa.int32())})
    columns = {name: full.column(name) for name in full.column_names}
    columns["example_id"] = pa.array(ids)
    columns["nll"] = pc.fill_null(full.column("nll"), pa.scalar(float("nan"), pa.float32()))
    for name in ("n_tokens", "n_bytes"):
        columns[name] = pc.fill_null(full.column(name), pa.scalar(0, pa.int32()))
    columns[SCORED] = pa.array(wanted)
    write_table(pa.table(columns), out, metadata)
    reused = int((source >= 0).sum())
    log.info("cells: %d of %d examples measured, %d read again from %d earlier file(s), %d scored now",
             int(wanted.sum()), len(frame), reused, len(earlier), len(todo))
    summary = {**summary, "examples": int(len(frame)), "cells": int(wanted.sum()), "cells_read_again": reused,
               "cells_scored": int(len(todo))}
    return summary
