"""An item map from the evaluation logs researchers already hold: each checkpoint of one base a row, each logged
item a column, its correctness the log's metric (forgetmap.correctness.logs reads the files, as the post-training
map imports them).

Per checkpoint, one or more files (or globs) of one format:
- lm-evaluation-harness `--log_samples` files, `samples_<task>_<date>.jsonl`: the task is the file's name;
- LightEval details, `details_<task>_<date>.parquet`: the task is LightEval's name without its suite and few-shot
  count (`bench_mc` of `custom|bench_mc|0` or `bench_mc|0`).

An item is named as the forgetting monitor names an lm-eval task's items (forgetmap.correctness.benchmark):
`{task}/{doc_id}`, lm-eval's document number, which is the document's row in the task's data; LightEval's
document `id` is that row too, so both tools' logs of one task name its items alike. `id` is another template
over the log's fields (`task`, `doc_id`, `doc`), e.g. `{task}/{doc[id]}` for documents with ids of their own. Every
checkpoint must hold the same items (its row of the map is complete); one named `base` is the map's record of
the base's correctness (`before`), checked against a run's baseline, and not a row.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..correctness.logs import DEFAULT_METRIC, FORMATS, READERS, seed_files
from ..errors import DataError
from .items import ItemMap

ID = "{task}/{doc_id}"  # how ItemWatch names an lm-eval task's items
NAMES = {"lm_eval": re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl"),
         "lighteval": re.compile(r"details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.parquet")}


def task_of(path: str, format: str) -> str:
    """The evaluation task a log file holds, from its name as the tool writes it."""
    found = NAMES[format].fullmatch(Path(path).name)
    if found is None:
        pattern = "samples_<task>_<date>.jsonl" if format == "lm_eval" else "details_<task>_<date>.parquet"
        raise DataError(f"{path}: not named as {format} names its per-sample logs ({pattern})")
    task = found["task"]
    if format == "lighteval":  # suite|task|few-shot, or task|few-shot
        parts = task.split("|")
        task = parts[1] if len(parts) >= 3 else parts[0] if len(parts) == 2 and parts[1].isdigit() else task
    return task


def logged_correctness(files: list[str], format: str = "lm_eval", metric: str | None = None,
                       id: str = ID) -> tuple[pd.Series, pd.Series]:
    """One checkpoint's correctness (0/1) per item id and each item's option margin (the gold option's summed
    log-likelihood less the best other's, where the log holds the options' and the metric is `acc` (lm-eval) or
    the log-likelihoods are LightEval's; NaN otherwise), from its log files (several tasks are several files)."""
    if format not in FORMATS:
        raise DataError(f"format {format!r}: one of {', '.join(FORMATS)}")
    metric = metric or DEFAULT_METRIC[format]
    found: dict[str, int] = {}
    margins: dict[str, float] = {}
    for path in files:
        task = task_of(path, format)
        logged = READERS[format](path, metric)
        for record in logged.itertuples():
            try:
                key = id.format(task=task, doc_id=record.doc_id, doc=record.doc)
            except (KeyError, IndexError, AttributeError) as exc:
                raise DataError(f"{record.where}: the id template {id!r} names a field the log lacks ({exc})") from None
            if key in found:
                raise DataError(f"{record.where}: item {key} is logged twice for this checkpoint")
            found[key] = int(record.correct)
            margins[key] = float(record.margin)
    return pd.Series(found, dtype=np.float32), pd.Series(margins, dtype=np.float32)


def item_map_from_logs(checkpoints: dict, format: str = "lm_eval", metric: str | None = None, id: str = ID,
                       base: str | None = None, method: str = "additive", params: dict | None = None) -> ItemMap:
    """An `ItemMap` whose rows are the checkpoints' logged correctness: `checkpoints` {name: a file, a glob or a
    list of them} of one base's checkpoints, in `format` (lm_eval or lighteval) with `metric` (the format's
    default: acc, extractive_match); `base`: the checkpoint that is the base itself (its correctness is the
    map's `before`, not a row); `id`: how an item is named (ID: as the monitor names an lm-eval task's). A
    checkpoint evaluated by the other tool gives {"files": ..., "format": ..., "metric": ..., "id": ...} instead:
    its items named by its own template as the others' are."""
    rows, gaps, recorded = {}, {}, {}
    for name, given in checkpoints.items():
        spec = dict(given) if isinstance(given, dict) else {"files": given}
        unknown = sorted(set(spec) - {"files", "format", "metric", "id"})
        if unknown or "files" not in spec:
            raise DataError(f"checkpoint {name!r}: {'unknown key(s) ' + ', '.join(unknown) if unknown else 'no files'}"
                            f" (a checkpoint gives files, and may give format, metric and id)")
        patterns = [spec["files"]] if isinstance(spec["files"], (str, Path)) else list(spec["files"])
        files = sorted({f for found in seed_files([str(p) for p in patterns]) for f in found})
        if not files:
            raise DataError(f"checkpoint {name!r}: no log file matches {', '.join(map(str, patterns))}")
        used = {"format": spec.get("format", format), "metric": spec.get("metric", metric), "id": spec.get("id", id)}
        rows[str(name)], gaps[str(name)] = logged_correctness(files, **used)
        recorded[str(name)] = {"files": list(map(str, patterns)), **used}
    if base is not None and base not in rows:
        raise DataError(f"base {base!r}: not among the checkpoints ({', '.join(rows)})")
    first = next(iter(rows))
    items = rows[first].index
    for name, row in rows.items():
        missing, extra = items.difference(row.index), row.index.difference(items)
        if len(missing) or len(extra):
            what = f"lacks {len(missing)} of checkpoint {first!r}'s items (first: {', '.join(missing[:3])})" \
                if len(missing) else f"holds {len(extra)} items checkpoint {first!r} does not (first: " \
                                     f"{', '.join(extra[:3])})"
            raise DataError(f"checkpoint {name!r} {what}: every checkpoint of an item map is logged on the same "
                            f"items")
    order = sorted(items, key=_natural)
    before = rows.pop(base).reindex(order) if base is not None else None
    gaps.pop(base, None)
    if len(rows) < 2:
        raise DataError(f"{len(rows)} checkpoint(s) besides the base: an item map needs at least two rows")
    frame = pd.DataFrame({name: row.reindex(order) for name, row in rows.items()}).T
    margins = pd.DataFrame({name: gap.reindex(order) for name, gap in gaps.items()}).T
    about = {"logs": recorded, "base": base}
    return ItemMap.from_rows(frame, before=before, method=method, params=params, about=about,
                             margins=margins if np.isfinite(margins.to_numpy()).any() else None)


def _natural(item: str) -> tuple:
    """`task/10` after `task/9`: the ids' numbers compared as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", item))


def item_map_command(checkpoint: list[str], format: str, metric: str | None, id: str, base: str | None,
                     method: str, out: str) -> dict:
    """`forgetmap item-map`: `checkpoint` NAME=FILE_OR_GLOB (repeated for a checkpoint's several files) to an
    item map file."""
    checkpoints: dict[str, list[str]] = {}
    for given in checkpoint:
        name, sep, files = given.partition("=")
        if not sep or not name or not files:
            raise DataError(f"--checkpoint {given!r}: NAME=FILE_OR_GLOB")
        checkpoints.setdefault(name, []).append(files)
    item_map = item_map_from_logs(checkpoints, format, metric, id, base, method)
    item_map.write(out)
    return {"rows": item_map.rows, "items": len(item_map.item_ids), "base": base,
            "accuracy": {r: float(v) for r, v in zip(item_map.rows, item_map.train.mean(axis=1))}}
