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
    "bpb_change": "Z = NLL after - NLL before in bits per UTF-8 byte of the scored text (comparable across "
                  "tokenizers); positive = forgotten",
    "transition": "correctness before and after as 2 * before + after: 0 = 0->0, 1 = 0->1, 2 = 1->0, 3 = 1->1",
    "forgotten_1to0": "Y = 1 where an item the base answered correctly is answered wrongly after fine-tuning, "
                      "0 where it stays correct, missing where the base was wrong",
    "transferred_0to1": "Y_BT = 1 where an item the base answered wrongly is answered correctly after fine-tuning, "
                        "0 where it stays wrong, missing where the base was right",
}
BINARY_STATISTICS = ("forgotten_1to0", "transferred_0to1")


def measured_column(task: str) -> str:
    """A fractional map's column saying which of a row's cells were measured."""
    return f"measured:{task}"


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
    # a fractional map (forgetmap.fractional): which cells were measured (M x N bool; None: every cell) and how the
    # rest were completed (the metadata's `cells`: fraction, design, rank, level and each row's half-width)
    measured: np.ndarray | None = None
    cells: dict | None = None

    def __post_init__(self):
        self.values = np.asarray(self.values, dtype=np.float32)
        if self.statistic not in STATISTICS:
            raise ValueError(f"unknown statistic {self.statistic!r}; known: {', '.join(STATISTICS)}")
        if self.values.shape != (len(self.tasks), len(self.example_ids)):
            raise ValueError(f"values have shape {self.values.shape}, expected "
                             f"({len(self.tasks)} tasks, {len(self.example_ids)} examples)")
        if self.measured is not None and np.shape(self.measured) != self.values.shape:
            raise ValueError(f"measured has shape {np.shape(self.measured)}, expected {self.values.shape}")

    @property
    def completed(self) -> bool:
        """Whether some cells are completed, not measured (a fractional map)."""
        return self.measured is not None and not bool(np.all(self.measured))

    def measured_values(self) -> np.ndarray:
        """The values with every completed cell NaN: what an analysis that may read measured cells only reads."""
        return self.values if self.measured is None else np.where(self.measured, self.values, np.nan)

    def require_measured(self, where: str, use: str) -> None:
        """Refuse a fractional map where only measured cells are valid (`use`: what reads every cell of a row)."""
        if self.completed:
            raise DataError(f"{where}: a fractional map ({self.reads()}), and {use} reads every example of each row it "
                            f"fits: only measured cells are valid there; build the map in full "
                            f"(models.NAME.score.cells: 1)")

    def halfwidths(self) -> np.ndarray:
        """(M, N): each completed cell's conformal half-width at the map's level (its row's), 0 at measured cells."""
        if not self.completed:
            return np.zeros(self.shape, dtype=np.float32)
        rows = np.array([self.cells["halfwidth"][t] for t in self.tasks], dtype=np.float32)
        return np.where(self.measured, np.float32(0), rows[:, None])

    def reads(self, measured_only: bool = False) -> str:
        """What an analysis read, for its table: `measured` (a full map); of a fractional map, `measured cells`
        where it read `measured_values()` alone, else `completed (P % measured)`."""
        if not self.completed:
            return "measured"
        if measured_only:
            return "measured cells"
        return f"completed ({100 * float(np.mean(self.measured)):.0f} % measured)"

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
        if self.measured is not None:  # a fractional map: which cells each row measured, after the rows
            columns.update({measured_column(t): pa.array(self.measured[i]) for i, t in enumerate(self.tasks)})
        metadata = {"format_version": FORMAT_VERSION, "statistic": self.statistic, "tasks": self.tasks,
                    "categories": self.categories, "groups": self.groups, **(extra_metadata or {})}
        if self.cells is not None:
            metadata["cells"] = self.cells
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
        measured = None
        if meta.get("cells") is not None:
            missing = [measured_column(t) for t in tasks if measured_column(t) not in names]
            if missing:
                raise DataError(f"{path}: a fractional map without its column(s) {', '.join(missing[:3])}")
            measured = np.stack([source.read(columns=[measured_column(t)]).column(0).to_numpy(zero_copy_only=False)
                                 for t in tasks]).astype(bool) if tasks else np.zeros((0, labels.num_rows), bool)
        return cls(values, list(tasks), labels.column("example_id").to_numpy().astype(str),
                   labels.column("source").to_numpy().astype(str),
                   labels.column("base_nll").to_numpy().astype(np.float32),
                   meta.get("categories", {}), meta.get("groups", {}), statistic, measured, meta.get("cells"))

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame({"example_id": self.example_ids, "source": self.sources, "base_nll": self.base_nll})
        return pd.concat([frame, pd.DataFrame(self.values.T, columns=self.tasks)], axis=1)


def _read_scored(path: str | Path) -> np.ndarray:
    """Which examples a score file measured: its `scored` column (a fractional map's run, forgetmap.cells), else
    every one."""
    names = pq.read_schema(path).names
    if "scored" not in names:
        return np.ones(pq.read_metadata(path).num_rows, dtype=bool)
    return pq.read_table(path, columns=["scored"]).column(0).to_numpy(zero_copy_only=False).astype(bool)


def _read_scores(path: str | Path, expected_ids: np.ndarray, statistic: str = "nll_change") -> np.ndarray:
    """One score file's NLL per example: nats per token, or (bpb_change) bits per byte of the scored text."""
    columns = ["example_id", "nll"] + ["n_tokens", "n_bytes"] * (statistic == "bpb_change")
    if statistic == "bpb_change" and "n_bytes" not in pq.read_schema(path).names:
        raise DataError(f"{path}: no column 'n_bytes' (it was scored before bits per byte were counted); rescore it")
    scores = pq.read_table(path, columns=columns)
    ids = scores.column("example_id").to_numpy().astype(str)
    if len(ids) != len(expected_ids) or not np.array_equal(ids, expected_ids):
        raise DataError(f"{path}: its example ids do not match the upstream shard it scores "
                        f"({len(ids)} vs {len(expected_ids)} examples); rescore it")
    nll = scores.column("nll").to_numpy().astype(np.float64)
    if statistic == "bpb_change":
        n_bytes = scores.column("n_bytes").to_numpy().astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            nll = np.where(n_bytes > 0, nll * scores.column("n_tokens").to_numpy() / (n_bytes * np.log(2)), np.nan)
    return nll.astype(np.float32)


def assemble(shards: list[str], base_scores: list[str], task_scores: dict[str, list[str]],
             categories: dict[str, str], groups: dict[str, str], references: dict[str, str] | None = None,
             statistic: str = "nll_change") -> ForgettingMatrix:
    """Stack per-shard scores into Z; every run must score exactly the shards' examples, in order. A row's
    `reference` (default: the base) is the run it is compared with: `base` or another row (a chain of
    checkpoints, each stage against the one before)."""
    ids, sources = [], []
    for shard in shards:
        table = pq.read_table(shard, columns=["example_id", "source"])
        ids.append(table.column("example_id").to_numpy().astype(str))
        sources.append(table.column("source").to_numpy().astype(str))
    runs = {"base": np.concatenate([_read_scores(p, i, statistic) for p, i in zip(base_scores, ids)])}
    for task, paths in task_scores.items():
        if len(paths) != len(shards):
            raise DataError(f"task {task!r}: {len(paths)} score files for {len(shards)} upstream shards")
        runs[task] = np.concatenate([_read_scores(p, i, statistic) for p, i in zip(paths, ids)])
    references = references or {}
    values = np.empty((len(task_scores), len(runs["base"])), dtype=np.float32)
    measured = np.ones(values.shape, dtype=bool)
    for row, task in enumerate(task_scores):
        values[row] = runs[task] - runs[references.get(task, "base")]
        measured[row] = np.concatenate([_read_scored(p) for p in task_scores[task]])
    tasks = list(task_scores)
    return ForgettingMatrix(values, tasks, np.concatenate(ids), np.concatenate(sources), runs["base"],
                            {t: categories[t] for t in tasks}, {c: groups[c] for c in sorted({categories[t] for t in tasks})},
                            statistic, None if measured.all() else measured)


STATISTIC_OF_Z = {"nats_per_token": "nll_change", "bits_per_byte": "bpb_change"}  # models.NAME.z -> statistic


def assemble_rows(settings: dict, shards: list[str]) -> ForgettingMatrix:
    """The matrix the settings describe (forgetmap.plan's matrix settings, or a subset of its rows): every
    run's score files, and for checkpoint rows what each is compared with."""
    tasks = settings["tasks"]
    return assemble(shards, settings["base_scores"], {t: settings["task_scores"][t] for t in tasks},
                    settings["categories"], settings["groups"], settings.get("references"),
                    STATISTIC_OF_Z[settings.get("statistic", "nats_per_token")])


def matrix_command(settings: dict, shards: list[str], out: str) -> dict:
    """`forgetmap forgetting-matrix`: the settings name every run's score files (forgetmap.plan), and for
    checkpoint rows what each is compared with."""
    matrix = assemble_rows(settings, shards)
    extra = {"references": settings["references"], "checkpoints": settings["checkpoints"]} \
        if settings.get("checkpoints") else {}
    summary = {}
    if settings.get("cells"):
        summary = complete_map(matrix, settings["cells"])
    matrix.write(out, {"model": settings["model"], **extra})
    return {"tasks": matrix.shape[0], "examples": matrix.shape[1], "nan": int(np.isnan(matrix.values).sum()),
            "mean": float(np.nanmean(matrix.values)), "share_negative": float(np.nanmean(matrix.values < 0)), **summary}


def complete_map(matrix: ForgettingMatrix, cells: dict) -> dict:
    """A fractional map's unmeasured cells completed in place (forgetmap.fractional.complete: each task's source
    means plus a low-rank fit of the measured cells, a conformal half-width per completed cell at `cells['level']`,
    the same for every completed cell of a row); a measured cell whose scored span is empty stays NaN, as in a full
    map. Records the fraction, design, rank, level and half-widths in `matrix.cells`."""
    from .fractional import complete

    measured = np.ones(matrix.shape, dtype=bool) if matrix.measured is None else matrix.measured
    fit = complete(matrix.values, measured, matrix.sources, levels=(cells["level"],), seed=cells["seed"])
    matrix.values = fit.values.astype(np.float32)
    matrix.measured = measured
    widths = fit.halfwidths[float(cells["level"])]
    halfwidth = {t: float(widths[i][~measured[i]].max()) if (~measured[i]).any() else 0.0
                 for i, t in enumerate(matrix.tasks)}
    matrix.cells = {"fraction": cells["fraction"], "design": cells["design"], "seed": cells["seed"],
                    "measured_share": float(measured.mean()), "rank": int(fit.rank), "ridge": float(fit.reg),
                    "level": float(cells["level"]), "halfwidth": halfwidth}
    return {"measured_share": matrix.cells["measured_share"], "completion_rank": fit.rank}
