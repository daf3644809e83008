"""A benchmark's items watched while a fine-tune runs: every item's chance of being right now, and the benchmark's
accuracy, F (right at the baseline, wrong now) and BT (the reverse), from k items scored at each check.

The pieces:

- `ItemMap`, the correctness map: rows of other runs of the same base (fine-tunes, checkpoints) over the items,
  each a 0/1 or a seed mean; the workflow's transitions file makes one (`from_transitions`), and so do any rows a
  user holds (`from_rows`; from lm-eval and LightEval logs of other checkpoints, forgetmap.monitor.item_logs).
  A completion method fitted on its rows folds in a new row from its k scored items (`additive` by default;
  `irt`, tinyBenchmarks' item response model; any of forgetmap.predict's).
- `ItemWatch`: which items (a `Benchmark`: an lm-eval task's, or a forgetmap correctness stage's), which map,
  which k items (drawn at random by default: the bound below needs a random draw; `dopt` chooses the most
  informative for the map, and then the interval promises nothing), the level and a budget.
- At each check (`ItemWatch.check`): the k items scored on the live weights decide right or wrong; the map
  forecasts every other item's probability of being right (the k kept as measured); each rate is the mean over
  the N items of a per-item quantity (acc: right now; F: right at the baseline and wrong now; BT: wrong at the
  baseline and right now), estimated from the forecast and corrected by the k items' cross-fitted residuals
  (each scored item's forecast from the other k - 1: predict.bound.crossfit_bound), with Student's t interval.
  Over the draw of the k items that interval covers the rate of the weights at that check with probability
  about the level. The naive monitor's estimate from the same k items alone (the share among them, with an exact
  binomial interval) is logged beside it. Chance-adjusted rates (Harmon et al.): F_true = max(0, F - s),
  BT_true = max(0, BT - s), s the expected share of spurious flips of items unknown at both times,
  (1 - acc_before)(1 - acc_now) / (options - 1) per group of items with the same number of options, at the
  estimated accuracy (its uncertainty is not carried into the interval).

With `estimate="margins"` the rates come instead from the k items' option margins fitted against every item's at
the baseline (forgetmap.correctness.margins: a model's estimate, nearer for F, its interval calibrated on the
map's rows' margins). Without a map, the k items are all there is: the rates are the naive estimate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..correctness.forecast import bounded_rates, complete_items, naive_rates
from ..errors import DataError

log = logging.getLogger(__name__)

FORMAT = "item_map"
FORMAT_VERSION = 1
K = 30  # items scored at each check
# the share of the items whose correctness at the baseline must agree with the map's record of its base: bf16
# against fp32 flips items whose options are within rounding of each other; another model flips many more
AGREEMENT = 0.9


@dataclass
class ItemMap:
    item_ids: np.ndarray        # (N,) str
    sources: np.ndarray         # (N,) str
    train: np.ndarray           # (R, N) float32 in [0, 1]: each row's correctness of each item
    rows: list[str]
    before: np.ndarray          # (N,) float32: the map's base's correctness (NaN where it records none)
    method: str = "additive"
    params: dict = field(default_factory=dict)
    about: dict = field(default_factory=dict)
    path: str | None = None
    margins: np.ndarray | None = None  # (R, N) float32: each row's option margin at each item (NaN: free form)

    def __post_init__(self):
        self.item_ids = np.asarray(self.item_ids).astype(str)
        self.train = np.asarray(self.train, dtype=np.float32)
        where = self.path or "the item map"
        if self.train.ndim != 2 or self.train.shape[1] != len(self.item_ids):
            raise DataError(f"{where}: {self.train.shape} correctness values for {len(self.item_ids)} items")
        if self.margins is not None:
            self.margins = np.asarray(self.margins, dtype=np.float32)
            if self.margins.shape != self.train.shape:
                raise DataError(f"{where}: {self.margins.shape} margins for {self.train.shape} correctness values")
        outside = ~np.isfinite(self.train) | (self.train < 0) | (self.train > 1)
        if outside.any():
            r, i = np.argwhere(outside)[0]
            raise DataError(f"{where}: row {self.rows[r]!r}, item {self.item_ids[i]!r}: correctness "
                            f"{self.train[r, i]} (each row needs a value in [0, 1] at every item)")
        if len(self.rows) < 2:
            raise DataError(f"{where}: {len(self.rows)} row(s): a completion needs at least two runs of the base")
        duplicated = np.unique(self.item_ids, return_counts=True)
        if (duplicated[1] > 1).any():
            raise DataError(f"{where}: item id(s) {duplicated[0][duplicated[1] > 1][:5].tolist()} appear twice")

    @classmethod
    def from_rows(cls, correct, before=None, sources=None, method: str = "additive", params: dict | None = None,
                  about: dict | None = None, margins=None) -> "ItemMap":
        """A map from a frame of correctness (a row per run of the base, a column per item id; 0/1 or seed means):
        what lm-eval logs of other checkpoints give (forgetmap.correctness.logs reads them). `before`: the base's
        correctness per item (a Series or an array in column order), to check a run's base against; `margins`: a
        frame of the rows' option margins like `correct` (forgetmap.correctness.margins)."""
        import pandas as pd

        frame = pd.DataFrame(correct)
        ids = frame.columns.astype(str).to_numpy()
        base = np.full(len(ids), np.nan, np.float32) if before is None else \
            np.asarray(pd.Series(before).reindex(ids).to_numpy() if isinstance(before, pd.Series) else before,
                       dtype=np.float32)
        gaps = None if margins is None else \
            pd.DataFrame(margins).reindex(index=frame.index, columns=frame.columns).to_numpy(dtype=np.float32)
        return cls(ids, np.asarray(sources if sources is not None else [""] * len(ids)).astype(str),
                   frame.to_numpy(dtype=np.float32), [str(r) for r in frame.index], base, method, dict(params or {}),
                   dict(about or {}), margins=gaps)

    @classmethod
    def from_transitions(cls, path, rows: list[str] | None = None, method: str = "additive",
                         params: dict | None = None, scores=None) -> "ItemMap":
        """A map from the workflow's transitions file (`results/{model}/correctness/transitions.parquet`): each
        fine-tune's correctness after (its row), and the base's before where every row's reference is the base.
        `scores`: the folder of the rows' score files (`results/{model}/scores`), whose option margins the map then
        carries too (forgetmap.correctness.margins)."""
        from ..matrix import ForgettingMatrix

        matrix = ForgettingMatrix.read(path)
        if matrix.statistic != "transition":
            raise DataError(f"{path}: holds {matrix.statistic!r}; an item map reads transition codes (the "
                            f"transitions job's `transitions` output)")
        rows = list(matrix.tasks) if rows is None else list(rows)
        missing = [r for r in rows if r not in matrix.tasks]
        if missing:
            raise DataError(f"{path}: row(s) {', '.join(map(str, missing[:5]))} are not among its runs "
                            f"{', '.join(map(str, matrix.tasks[:5]))}")
        codes = matrix.values[[matrix.tasks.index(r) for r in rows]]
        befores = np.floor(codes / 2)
        same = np.all(befores == befores[0], axis=0)
        margins = None if scores is None else np.stack([scored_margins(Path(scores) / r, matrix.example_ids)
                                                         for r in rows])
        return cls(matrix.example_ids, matrix.sources, np.mod(codes, 2), rows,
                   np.where(same, befores[0], np.nan).astype(np.float32), method, dict(params or {}),
                   {"transitions": str(path), **({"scores": str(scores)} if scores is not None else {})},
                   margins=margins)

    def columns_of(self, ids: np.ndarray, where: str) -> np.ndarray:
        """The map's column of each item id, refusing items the map does not hold."""
        position = {e: i for i, e in enumerate(self.item_ids)}
        missing = [e for e in ids if e not in position]
        if missing:
            raise DataError(f"{self.path or 'the item map'}: {len(missing)} of the {len(ids)} items of {where} are "
                            f"not among its {len(self.item_ids)} items (first: {', '.join(map(str, missing[:3]))}): "
                            f"a map forecasts the items it was measured on; watch those, or build the map on these "
                            f"items")
        return np.array([position[e] for e in ids], dtype=np.int64)

    # --- the file -------------------------------------------------------------------------------------

    def write(self, path) -> None:
        import pyarrow as pa

        from ..io import write_table

        columns = {"item_id": pa.array(self.item_ids), "source": pa.array(self.sources.astype(str)),
                   "before": pa.array(self.before, pa.float32())}
        for r, name in enumerate(self.rows):
            columns[f"row:{name}"] = pa.array(self.train[r], pa.float32())
            if self.margins is not None:
                columns[f"margin:{name}"] = pa.array(self.margins[r], pa.float32())
        write_table(pa.table(columns), path, {"format": FORMAT, "format_version": FORMAT_VERSION, "rows": self.rows,
                                              "method": self.method, "params": self.params, "about": self.about})
        self.path = str(path)

    @classmethod
    def read(cls, path) -> "ItemMap":
        import pyarrow.parquet as pq

        from ..io import read_metadata

        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: file not found")
        try:
            meta = read_metadata(path)
            frame = pq.read_table(path).to_pandas()
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: not a readable item map ({exc}): the file is truncated or damaged: write it "
                            f"again (ItemMap.write)") from None
        if meta.get("format") != FORMAT:
            raise DataError(f"{path}: not an item map (format {meta.get('format')!r}; a transitions file is made "
                            f"into one with ItemMap.from_transitions)")
        missing = [c for c in ("item_id", "source", "before", *(f"row:{r}" for r in meta.get("rows", [])))
                   if c not in frame.columns]
        if missing or "rows" not in meta:
            raise DataError(f"{path}: the item map lacks {', '.join(missing) or 'its rows record'}: write it again")
        train = np.stack([frame[f"row:{r}"].to_numpy(dtype=np.float32) for r in meta["rows"]])
        margins = np.stack([frame[f"margin:{r}"].to_numpy(dtype=np.float32) for r in meta["rows"]]) \
            if all(f"margin:{r}" in frame.columns for r in meta["rows"]) else None
        return cls(frame["item_id"].to_numpy(), frame["source"].to_numpy().astype(str), train, list(meta["rows"]),
                   frame["before"].to_numpy(dtype=np.float32), meta.get("method", "additive"),
                   meta.get("params", {}), meta.get("about", {}), str(path), margins)


def scored_margins(folder: Path, ids: np.ndarray) -> np.ndarray:
    """Each of `ids`' option margin in a run's score files (`folder`/shard-*.parquet; NaN for a free-form item)."""
    import pyarrow.parquet as pq

    files = sorted(Path(folder).glob("shard-*.parquet"))
    if not files:
        raise DataError(f"{folder}: no score files (shard-*.parquet): the margins of this row were not scored")
    found = {}
    for path in files:
        table = pq.read_table(path, columns=["example_id", "margin"])
        found.update(zip(table.column("example_id").to_numpy(zero_copy_only=False).astype(str),
                         table.column("margin").to_numpy(zero_copy_only=False).astype(np.float64)))
    missing = [e for e in np.asarray(ids).astype(str) if e not in found]
    if missing:
        raise DataError(f"{folder}: item(s) {', '.join(missing[:3])} are not in its score files")
    return np.array([found[e] for e in np.asarray(ids).astype(str)], dtype=np.float32)


# --- the watch --------------------------------------------------------------------------------------------------

class ItemWatch:
    """`items`: a `Benchmark` (forgetmap.correctness.benchmark), an lm-eval task name or list of names (read with
    `lm_eval`'s keywords: include_path, num_fewshot, limit, chat_template, metric; `generate: True` watches a
    generate_until task's greedy answers too, with max_gen_toks and filter), or a callable of the tokenizer
    returning a `Benchmark`. `map`: an `ItemMap` or its file (None: the naive estimate from the k items
    alone). `k`: items scored at each check; `choose`: `random` (the interval's validity needs it) or `dopt`
    (the most informative for the map; its interval promises nothing). `budget`: {"acc_drop": x} (the accuracy's
    drop from the baseline) or {"F": x}, acting on the interval's upper end like the monitor's NLL budget.
    `estimate`: `completion` (the map's completion corrected by the k items: a design's interval) or `margins`
    (the k items' option margins against the baseline's: forgetmap.correctness.margins, a model's estimate,
    its interval calibrated on the map's rows' margins; multiple-choice items only)."""

    def __init__(self, items, map=None, *, k: int = K, choose: str = "random", seed: int = 0,
                 method: str | None = None, params: dict | None = None, budget: dict | None = None,
                 lm_eval: dict | None = None, estimate: str = "completion"):
        if choose not in ("random", "dopt"):
            raise ValueError(f"ItemWatch: choose is 'random' or 'dopt', not {choose!r}")
        if estimate not in ("completion", "margins"):
            raise ValueError(f"ItemWatch: estimate is 'completion' or 'margins', not {estimate!r}")
        if k < 2:
            raise ValueError(f"ItemWatch: k must be at least 2 items, not {k}")
        budget = dict(budget or {})
        unknown = [b for b in budget if b not in ("acc_drop", "F")]
        if unknown:
            raise ValueError(f"ItemWatch: budget key(s) {unknown}: a budget names acc_drop or F")
        if choose == "dopt" and map is None:
            raise ValueError("ItemWatch: choose='dopt' picks the items most informative for a map: give one (map=)")
        self.items, self.k, self.choose, self.seed, self.budget = items, k, choose, seed, budget
        self.lm_eval = dict(lm_eval or {})
        self.map = map if isinstance(map, ItemMap) or map is None else ItemMap.read(map)
        if self.map is not None and method is not None:
            self.map.method, self.map.params = method, dict(params or {})
        if estimate == "margins" and (self.map is None or self.map.margins is None):
            raise ValueError("ItemWatch: estimate='margins' calibrates its interval on a map's rows' option margins: "
                             "give a map that carries them (ItemMap.from_transitions(..., scores=), or "
                             "from_rows(..., margins=))")
        if estimate == "margins" and choose != "random":
            raise ValueError("ItemWatch: estimate='margins' fits the margins of items drawn at random (choose='random')")
        self.estimate = estimate
        self.factors: dict[str, float] | None = None  # the margins' interval factors, once calibrated
        self.benchmark = None

    def prepare(self, tokenizer, level: float, known: list[int] | None = None) -> None:
        """Tokenise the items, place them in the map, choose the k (or take `known`, a resumed run's), fit the
        completion and each item's conformal half-width at `level` (leave-one-row-out folds of the map's rows:
        forgetmap.predict.conformal; none where the map has fewer than three rows)."""
        from ..correctness.benchmark import Benchmark, from_lm_eval

        if isinstance(self.items, Benchmark):
            self.benchmark = self.items
        elif isinstance(self.items, (str, list, tuple)):
            self.benchmark = from_lm_eval(self.items, tokenizer, **self.lm_eval)
        else:
            self.benchmark = self.items(tokenizer)
        n = len(self.benchmark)
        self.options = self.benchmark.options
        free = int((self.options == 0).sum())
        if self.estimate == "margins" and free:
            raise DataError(f"{self.benchmark.describe()}: {free} of its {n} items are free form, which have no option "
                            f"margin: watch them with estimate='completion'")
        self.columns = None if self.map is None else self.map.columns_of(self.benchmark.ids, self.benchmark.describe())
        if known is not None:
            self.known = np.asarray(known, dtype=np.int64)
        elif self.k >= n:
            self.known = np.arange(n)
        elif self.choose == "random":
            self.known = np.sort(np.random.default_rng(self.seed).choice(n, self.k, replace=False))
        else:
            from ..predict.forecast import choose

            self.known = np.sort(np.asarray(choose(self.map.train[:, self.columns], self.k, "dopt", self.seed,
                                                   self.map.path or "the item map"), dtype=np.int64))
        self.model, self.widths = None, np.full(n, np.nan)
        if self.map is not None and len(self.known) < n and self.estimate == "completion":
            from ..predict.conformal import halfwidths
            from ..predict.registry import make_method

            train = self.map.train[:, self.columns]
            self.model = make_method(self.map.method, **self.map.params).fit(train)
            if len(train) >= 3:
                self.widths = halfwidths(train, self.known, self.model, self.map.method, self.map.params,
                                         [level])[level]

    def check_base(self, before: np.ndarray) -> None:
        """The run's baseline correctness against the map's record of its base's: another base disagrees."""
        if self.map is None:
            return
        recorded = self.map.before[self.columns]
        usable = np.isfinite(recorded)
        if not usable.any():
            log.info("%s records no base correctness: whether the run's model is the map's base is not checked",
                     self.map.path or "the item map")
            return
        agreement = float(np.mean(np.round(recorded[usable]) == before[usable]))
        if agreement < AGREEMENT:
            raise DataError(f"{self.map.path or 'the item map'}: the model being trained is right on other items than "
                            f"the map's base: they agree on {agreement:.1%} of {int(usable.sum())} items (at least "
                            f"{AGREEMENT:.0%} for the same base in another precision): the map is of another base, or "
                            f"its items were asked otherwise (prompt, shots, chat template)")

    def calibrate(self, base_margins: np.ndarray, before: np.ndarray, level: float) -> None:
        """The margins' interval factors at `level` (forgetmap.correctness.margins.calibration) on the map's rows
        that carry a margin at every watched item, against the run's baseline margins and correctness."""
        from ..correctness.margins import calibration

        if self.estimate != "margins" or len(self.known) >= len(self.benchmark):
            return
        margins, correct = self.map.margins[:, self.columns], self.map.train[:, self.columns]
        usable = np.isfinite(margins).all(axis=1)
        if not usable.any():
            raise DataError(f"{self.map.path or 'the item map'}: none of its {len(margins)} rows carries a margin at "
                            f"every item of {self.benchmark.describe()}: estimate='margins' has nothing to calibrate "
                            f"its interval on")
        self.factors = calibration(base_margins, before, margins[usable], correct[usable], len(self.known), level,
                                   seed=self.seed)

    def forecast(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(every item's probability of being right now (N,), the scored items' cross-fitted forecasts (k,) or
        None without a map)."""
        return complete_items(self.model, self.known, values, len(self.benchmark))

    def rates(self, values: np.ndarray, before: np.ndarray, level: float,
              margins: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, dict]:
        """(the forecast row, {scope: {rate: MeanBound}}): `all` the items, each benchmark by name where there
        are several, and `naive` the k items' own estimate. `margins`: (every item's at the baseline, the k's now),
        which `estimate='margins'` reads."""
        before = np.asarray(before, dtype=np.float64)
        naive = naive_rates(values, before[self.known], self.options[self.known], level)
        names = np.unique(self.benchmark.sources)
        if self.estimate == "margins" and len(self.known) < len(self.benchmark):
            from ..correctness.margins import margin_rates

            members = {name: np.flatnonzero(self.benchmark.sources == name) for name in names} if len(names) > 1 \
                else None
            row, out = margin_rates(margins[0], self.known, margins[1], values, before, self.options, self.factors,
                                    members, seed=self.seed)
            return row, {**out, "naive": naive}
        row, held = self.forecast(values)
        out = {"all": bounded_rates(row, self.known, values, held, before, self.options, level), "naive": naive}
        if len(names) > 1:
            for name in names:
                members = np.flatnonzero(self.benchmark.sources == name)
                scored = np.isin(self.known, members)
                position = {m: i for i, m in enumerate(members)}
                known = np.array([position[i] for i in self.known[scored]], dtype=np.int64)
                out[name] = bounded_rates(row[members], known, values[scored], None if held is None else held[scored],
                                           before[members], self.options[members], level) if scored.sum() >= 2 else {}
        return row, out

    def scalars(self, rates: dict, before: np.ndarray) -> dict[str, float]:
        """The check's scalars, named as the monitor names its own (`items_` then the scope where there are
        several benchmarks): estimate, lower and upper of each rate; the accuracy at the baseline and the upper
        end of its drop."""
        out = {"items_acc_before": float(np.mean(before))}
        for scope, bounds in rates.items():
            stem = "items_" if scope == "all" else f"items_{scope}_"
            for rate, bound in bounds.items():
                out[stem + rate] = bound.estimate
                out[stem + rate + "_lower"] = bound.lower
                out[stem + rate + "_upper"] = bound.upper
        out["items_acc_drop_upper"] = out["items_acc_before"] - rates["all"]["acc"].lower
        return out

    def over_budget(self, scalars: dict) -> list[str]:
        """The budgets the check's upper ends exceed, in words."""
        found = []
        for name, limit in self.budget.items():
            upper = scalars["items_acc_drop_upper" if name == "acc_drop" else "items_F_upper"]
            if np.isfinite(upper) and upper > limit:
                found.append(f"items' {name} upper bound {upper:.4f} above {limit}")
        return found

    def frame(self, row: np.ndarray, values: np.ndarray, before: np.ndarray, level: float):
        """The check's per-item rows: id, benchmark, options, right at the baseline, scored and its value, the
        forecast probability of being right now and its conformal interval at `level` (clipped to [0, 1]; a
        scored item's is its value)."""
        import pyarrow as pa

        n = len(self.benchmark)
        scored = np.zeros(n, dtype=bool)
        scored[self.known] = True
        correct = np.full(n, None, dtype=object)
        correct[self.known] = np.asarray(values).astype(int).tolist()
        return pa.table({"item_id": pa.array(self.benchmark.ids.astype(str)),
                         "source": pa.array(self.benchmark.sources.astype(str)),
                         "options": pa.array(self.options, pa.int16()),
                         "right_at_baseline": pa.array(np.asarray(before).astype(np.int8)),
                         "scored": pa.array(scored), "correct": pa.array(correct.tolist(), pa.int8()),
                         "forecast": pa.array(row, pa.float32()),
                         f"lower_{level:g}": pa.array(np.where(scored, row, np.clip(row - self.widths, 0, 1)), pa.float32()),
                         f"upper_{level:g}": pa.array(np.where(scored, row, np.clip(row + self.widths, 0, 1)), pa.float32())})

    def record(self) -> dict:
        return {"benchmark": self.benchmark.record(), "map": None if self.map is None else self.map.path,
                "method": None if self.model is None else self.map.method, "estimate": self.estimate,
                "factors": self.factors, "choose": self.choose,
                "k": len(self.known), "seed": self.seed, "known": self.benchmark.ids[self.known].tolist()}
