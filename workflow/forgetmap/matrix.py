"""The association matrix Z[task, example] = NLL_after_task(example) - NLL_before(example).

On disk (`results/{model}/forgetting.parquet`): one row per upstream example with `example_id`,
`source`, `base_nll`, then one float32 column per task (positive = forgotten). The parquet
key-value metadata (`forgetmap`) records the task order, each task's category and each category's
split group, and the statistic the values hold (`STATISTICS`). `ForgettingMatrix.read()` returns the
M x N float32 array (tasks x examples). What "forgotten" means is defined once, by `forgotten()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .io import read_metadata, write_table

LABEL_COLUMNS = ("example_id", "source", "base_nll")
FORMAT_VERSION = 1
# what a matrix's values are; every matrix file records one of these under `statistic`
STATISTICS = {
    "nll_change": "Z = NLL after fine-tuning - NLL before (nats per token); positive = forgotten",
    "transition": "correctness before and after as 2 * before + after: 0 = 0->0, 1 = 0->1, 2 = 1->0, 3 = 1->1",
    "forgotten_1to0": "Y = 1 where an item the base answered correctly is answered wrongly after fine-tuning, "
                      "0 where it stays correct, missing where the base was wrong",
    "transferred_0to1": "Y_BT = 1 where an item the base answered wrongly is answered correctly after fine-tuning, "
                        "0 where it stays wrong, missing where the base was right",
}
BINARY_STATISTICS = ("forgotten_1to0", "transferred_0to1")


def forgotten(values: np.ndarray, threshold: float = 0.0) -> np.ndarray:
    """The one definition of a forgotten entry: its value exceeds `threshold` (0: any loss increase;
    for a 0/1 transition matrix, any threshold in [0, 1) selects the 1s)."""
    return np.asarray(values) > threshold


@dataclass
class ForgettingMatrix:
    values: np.ndarray            # (M tasks, N examples) float32
    tasks: list[str]
    example_ids: np.ndarray       # (N,) str
    sources: np.ndarray           # (N,) str
    base_nll: np.ndarray          # (N,) float32
    categories: dict[str, str] = field(default_factory=dict)   # task -> category
    groups: dict[str, str] = field(default_factory=dict)       # category -> split group
    statistic: str = "nll_change"                              # a key of STATISTICS

    def __post_init__(self):
        self.values = np.asarray(self.values, dtype=np.float32)
        if self.statistic not in STATISTICS:
            raise ValueError(f"unknown statistic {self.statistic!r}; known: {', '.join(STATISTICS)}")
        if self.values.shape != (len(self.tasks), len(self.example_ids)):
            raise ValueError(f"values have shape {self.values.shape}, expected "
                             f"({len(self.tasks)} tasks, {len(self.example_ids)} examples)")

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape

    def task_categories(self) -> list[str]:
        return [self.categories.get(t, "") for t in self.tasks]

    def row(self, task: str) -> np.ndarray:
        return self.values[self.tasks.index(task)]

    def write(self, path: str | Path, extra_metadata: dict | None = None, extra_columns: dict | None = None) -> None:
        """`extra_columns`: per-example label columns written after `base_nll` (e.g. each item's k)."""
        columns = {"example_id": pa.array(self.example_ids.astype(str)),
                   "source": pa.array(self.sources.astype(str)),
                   "base_nll": pa.array(self.base_nll, pa.float32()), **(extra_columns or {})}
        columns.update({t: pa.array(self.values[i], pa.float32()) for i, t in enumerate(self.tasks)})
        metadata = {"format_version": FORMAT_VERSION, "statistic": self.statistic, "tasks": self.tasks,
                    "categories": self.categories, "groups": self.groups, **(extra_metadata or {})}
        write_table(pa.table(columns), path, metadata)

    @classmethod
    def read(cls, path: str | Path) -> "ForgettingMatrix":
        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: file not found")
        meta = read_metadata(path)
        names = pq.read_schema(path).names
        tasks = meta.get("tasks") or [c for c in names if c not in LABEL_COLUMNS]
        missing = [c for c in (*LABEL_COLUMNS, *tasks) if c not in names]
        if missing:
            raise DataError(f"{path}: not a forgetting matrix, missing column(s) {', '.join(missing)}")
        statistic = meta.get("statistic", "nll_change")  # files written before it was recorded held Z
        if statistic not in STATISTICS:
            raise DataError(f"{path}: metadata 'statistic' {statistic!r} is not one of {', '.join(STATISTICS)}")
        source = pq.ParquetFile(path)
        labels = source.read(columns=list(LABEL_COLUMNS))
        values = np.empty((len(tasks), labels.num_rows), dtype=np.float32)
        for start in range(0, len(tasks), 8):  # a few columns at a time: peak memory stays near Z itself
            block = source.read(columns=tasks[start:start + 8])
            for i, t in enumerate(tasks[start:start + 8]):
                values[start + i] = block.column(t).to_numpy()
        return cls(values, list(tasks), labels.column("example_id").to_numpy().astype(str),
                   labels.column("source").to_numpy().astype(str),
                   labels.column("base_nll").to_numpy().astype(np.float32),
                   meta.get("categories", {}), meta.get("groups", {}), statistic)

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame({"example_id": self.example_ids, "source": self.sources, "base_nll": self.base_nll})
        return pd.concat([frame, pd.DataFrame(self.values.T, columns=self.tasks)], axis=1)


def _read_scores(path: str | Path, expected_ids: np.ndarray) -> np.ndarray:
    scores = pq.read_table(path, columns=["example_id", "nll"])
    ids = scores.column("example_id").to_numpy().astype(str)
    if len(ids) != len(expected_ids) or not np.array_equal(ids, expected_ids):
        raise DataError(f"{path}: its example ids do not match the upstream shard it scores "
                        f"({len(ids)} vs {len(expected_ids)} examples); rescore it")
    return scores.column("nll").to_numpy().astype(np.float32)


def assemble(shards: list[str], base_scores: list[str], task_scores: dict[str, list[str]],
             categories: dict[str, str], groups: dict[str, str]) -> ForgettingMatrix:
    """Stack per-shard scores into Z; every run must score exactly the shards' examples, in order."""
    ids, sources = [], []
    for shard in shards:
        table = pq.read_table(shard, columns=["example_id", "source"])
        ids.append(table.column("example_id").to_numpy().astype(str))
        sources.append(table.column("source").to_numpy().astype(str))
    base = np.concatenate([_read_scores(p, i) for p, i in zip(base_scores, ids)])
    values = np.empty((len(task_scores), len(base)), dtype=np.float32)
    for row, (task, paths) in enumerate(task_scores.items()):
        if len(paths) != len(shards):
            raise DataError(f"task {task!r}: {len(paths)} score files for {len(shards)} upstream shards")
        after = np.concatenate([_read_scores(p, i) for p, i in zip(paths, ids)])
        values[row] = after - base
    tasks = list(task_scores)
    return ForgettingMatrix(values, tasks, np.concatenate(ids), np.concatenate(sources), base,
                            {t: categories[t] for t in tasks}, {c: groups[c] for c in sorted({categories[t] for t in tasks})})


def matrix_command(settings: dict, shards: list[str], out: str) -> dict:
    """`forgetmap forgetting-matrix`: the settings name every run's score files (forgetmap.plan)."""
    tasks = settings["tasks"]
    matrix = assemble(shards, settings["base_scores"], {t: settings["task_scores"][t] for t in tasks},
                      settings["categories"], settings["groups"])
    matrix.write(out, {"model": settings["model"]})
    return {"tasks": matrix.shape[0], "examples": matrix.shape[1], "nan": int(np.isnan(matrix.values).sum()),
            "mean": float(np.nanmean(matrix.values)), "share_negative": float(np.nanmean(matrix.values < 0))}
