"""The prediction protocol (paper §5.1): for each test task, k known columns, the rest predicted.

For each seed, k columns are drawn once with `default_rng(seed)`, *without replacement* (the
reference draws with replacement, so it reveals up to k distinct columns), and revealed for every
test task, as the reference does; `prediction.probes` may choose them from the train rows instead
(forgetmap.predict.probes). Metrics use the hidden entries only; with interval levels, each seed's
split-conformal half-widths (forgetmap.predict.conformal) are written beside its predictions and
their coverage and width join the metrics. Every method is fitted once
per split on the train rows; each seed is one batched `predict` over all test tasks.

Examples with a NaN in any train or test row are left out of the split (the reference turns NaN into
0; leaving them out never scores a made-up entry); their predictions are NaN. Predictions are produced
and written one seed at a time, so memory does not grow with the number of seeds.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import DataError
from .conformal import ColumnScale, coverage, halfwidths
from .metrics import evaluate
from .probes import choose_probes, design
from .registry import make_method, parameters

log = logging.getLogger(__name__)


def check_split(tasks: list[str], train: list[str], test: list[str], name: str) -> None:
    if not train or not test:
        raise DataError(f"split {name!r}: it has {len(train)} train and {len(test)} test tasks; both must be non-empty")
    both = sorted(set(train) & set(test))
    if both:
        raise DataError(f"split {name!r}: task(s) {both} are both train and test tasks")
    missing = [t for t in train + test if t not in tasks]
    if missing:
        raise DataError(f"split {name!r}: task(s) {missing[:5]} are not in the forgetting matrix")


def known_columns(n_examples: int, k: int, seed: int) -> np.ndarray:
    """The paper's draw: `k` sorted columns without replacement (forgetmap.predict.probes `random`)."""
    return choose_probes("random", n_examples, k, seed)


def prepare_split(z: np.ndarray, tasks: list[str], train: list[str], test: list[str], k: int, name: str,
                  also_finite: np.ndarray | None = None):
    """(usable columns, train and test row indices, train rows, test rows (float32)) after the checks;
    `also_finite`: another matrix of the same shape whose NaN columns are left out too."""
    check_split(tasks, train, test, name)
    rows_train = [tasks.index(t) for t in train]
    rows_test = [tasks.index(t) for t in test]
    finite = np.ones(z.shape[1], dtype=bool)
    for row in rows_train + rows_test:  # row by row: no copy of the split's rows just to find NaN
        finite &= np.isfinite(z[row])
        if also_finite is not None:
            finite &= np.isfinite(also_finite[row])
    usable = np.flatnonzero(finite)
    if k >= len(usable):
        raise DataError(f"split {name!r}: k = {k} known columns leaves nothing to predict among "
                        f"{len(usable)} usable examples")
    everything = len(usable) == z.shape[1]
    train_z = np.asarray(z[rows_train] if everything else z[np.ix_(rows_train, usable)], dtype=np.float32)
    test_z = np.asarray(z[rows_test] if everything else z[np.ix_(rows_test, usable)], dtype=np.float32)
    return usable, rows_train, rows_test, train_z, test_z


def interval_capable(model, params: dict) -> bool:
    """Intervals need a regression (not a ranking score) and no side information to re-split."""
    return getattr(model, "regression", True) and "similarity_train" not in params


def iterate_split(z: np.ndarray, tasks: list[str], train: list[str], test: list[str], method: str, params: dict,
                  k: int, seeds: list[int], name: str = "split", metric_options: dict | None = None,
                  similarity: np.ndarray | None = None, source: np.ndarray | None = None, evaluator=None,
                  probes: str = "random", intervals: tuple[float, ...] = (), measured: np.ndarray | None = None):
    """Fit `method` once on the train rows, then for each seed yield (seed, predicted test rows over
    all N examples (float32, NaN at left-out examples), known columns in the full index, metrics,
    the fitted method, {level: interval half-width per example (float32, NaN at left-out ones)}).

    `source`: a matrix aligned with `z` that the method is fitted on and folds new tasks in from
    (the continuous Z predicting the binary Y); `evaluator(pred, truth, hidden, model)` replaces the
    regression metrics. `probes`: how the known columns are chosen (forgetmap.predict.probes), from
    the train rows alone. `intervals`: conformal levels (forgetmap.predict.conformal), for methods
    that regress; their coverage and width join the metrics. One seed's predictions at a time: memory
    stays near the matrix whatever the number of seeds. `measured` (a fractional map, forgetmap.fractional:
    which cells of Z were measured): each test task's k known columns are drawn among its own measured cells
    and only its measured cells are scored, with its own half-widths ((T, N) per level)."""
    usable, rows_train, rows_test, train_z, test_z = prepare_split(z, tasks, train, test, k, name, source)
    truth = test_z
    if source is not None:  # the same usable columns, the rows the method sees taken from `source`
        _, _, _, train_z, test_z = prepare_split(source, tasks, train, test, k, name, z)
    if similarity is not None:  # side information aligned with Z (tasks x examples), e.g. for `semantic`
        def rows(indices):  # views of the rows where every example is usable, else copies of the usable part
            return [similarity[i] if len(usable) == z.shape[1] else similarity[i, usable] for i in indices]

        params = {**params, "similarity_train": rows(rows_train), "similarity_test": rows(rows_test)}
    threshold = (metric_options or {}).get("threshold", 0.0)
    if "threshold" in parameters(method) and "threshold" not in params:  # binary methods: the metrics' label
        params = {**params, "threshold": threshold}
    model = make_method(method, **params).fit(train_z)
    phi, ridge, noise = design(train_z) if probes != "random" else (None, 1.0, None)
    levels = tuple(intervals) if intervals and interval_capable(model, params) else ()
    if levels and len(rows_train) < 3:
        log.warning("split %s: %d train task(s); conformal intervals need at least 3 to leave one out: none written",
                    name, len(rows_train))
        levels = ()
    if not levels:
        del train_z  # the fitted method keeps what it needs
    scale = ColumnScale(train_z) if levels else None  # one pass over the train rows for every seed
    own = None if measured is None else np.asarray(measured, dtype=bool)[np.ix_(
        rows_test, usable)]  # each test row's measured cells among the usable columns
    if own is not None and (own.sum(axis=1) <= k).any():
        short = test[int(np.argmin(own.sum(axis=1)))]
        raise DataError(f"split {name!r}: test task {short!r} has {int(own.sum(axis=1).min())} measured cells, not "
                        f"more than k = {k}: nothing of its row is left to judge a prediction by")
    for seed in seeds:
        if own is None:
            known = choose_probes(probes, len(usable), k, seed, phi, ridge, noise)
            known_t = np.broadcast_to(known, (len(test), k))
        else:  # a fractional map: each test row's probes among its own measured cells
            known_t = np.stack([np.sort(np.random.default_rng([seed, t]).choice(np.flatnonzero(row), k, replace=False))
                                for t, row in enumerate(own)])
            known = known_t
        values_t = np.take_along_axis(test_z, known_t, axis=1).astype(np.float64)
        pred = model.predict(known_t, values_t).astype(np.float32, copy=False)
        hidden = np.ones(test_z.shape, dtype=bool) if own is None else own.copy()
        np.put_along_axis(hidden, known_t, False, axis=1)
        if evaluator is not None:
            metrics = evaluator(pred, truth, hidden, model)
        else:
            metrics = evaluate(pred, truth, hidden, regression=getattr(model, "regression", True),
                               **(metric_options or {}))
        widths = {}
        if levels and own is None:
            widths = halfwidths(train_z, known, model, method, params, list(levels), scale)
        elif levels:  # each test row's own probes: its own half-widths
            rows = [halfwidths(train_z, row, model, method, params, list(levels), scale) for row in known_t]
            widths = {level: np.stack([r[level] for r in rows]) for level in levels}
        for level, width in widths.items():
            metrics[f"coverage_{level:g}"], metrics[f"width_{level:g}"] = coverage(pred, truth, hidden, width)
        if own is not None:  # what the scores read: the train rows' cells measured, the rest completed
            metrics["train_cells_measured"] = float(np.asarray(measured)[rows_train].mean())
        yield seed, _full(pred, usable, z.shape[1]), usable[known], metrics, model, {
            level: _full(width, usable, z.shape[1]) if width.ndim == 2 else _full(width[None, :], usable, z.shape[1])[0]
            for level, width in widths.items()}


def _full(rows: np.ndarray, usable: np.ndarray, n: int) -> np.ndarray:
    """Rows over the usable columns spread over all `n` columns (NaN at the left-out ones)."""
    if len(usable) == n:
        return rows
    full = np.full((len(rows), n), np.nan, dtype=np.float32)
    full[:, usable] = rows
    return full


def run_split(z, tasks, train, test, method, params, k, seeds, name="split", metric_options=None, similarity=None,
              **options):
    """All seeds at once: (predictions (S, T, N), known (S, k), metrics per seed, fitted method)."""
    out = list(iterate_split(z, tasks, train, test, method, params, k, seeds, name, metric_options, similarity,
                             **options))
    return (np.stack([o[1] for o in out]), np.stack([o[2] for o in out]), [o[3] for o in out],
            out[-1][4] if out else None)


def seed_file(directory, seed: int) -> Path:
    """Where a prediction directory holds one seed's predicted rows."""
    return Path(directory) / f"seed-{seed}.parquet"


def intervals_file(directory, seed: int) -> Path:
    """Where a prediction directory holds one seed's conformal half-widths (if the method gives any)."""
    return Path(directory) / f"intervals-{seed}.parquet"


def write_seed(example_ids, split: dict, method: str, seed: int, predictions, known, model, out) -> None:
    """One seed's predicted rows: `example_id`, then one float32 column per test task."""
    import pyarrow as pa

    from ..io import write_table

    columns = {"example_id": pa.array(example_ids.astype(str))}
    for t, task in enumerate(split["test_tasks"]):
        columns[task] = pa.array(predictions[t], pa.float32())
    fitted = {k: v for k, v in vars(model).items() if k.endswith("_") and isinstance(v, (int, float))}
    write_table(pa.table(columns), out, {"split": split["name"], "method": method, "seed": seed,
                                         "train_tasks": split["train_tasks"], "known_columns": known.tolist(),
                                         "fitted": fitted})


def interval_column(level: float, task: str | None = None) -> str:
    """A half-width column: one for every test task, or (`task`) one task's own (a fractional map's)."""
    return f"halfwidth_{level:g}" if task is None else f"{task}:halfwidth_{level:g}"


def interval_column_of(path, level: float, task: str) -> str | None:
    """The column of an intervals file that holds `task`'s half-widths at `level`: the task's own (a fractional
    map's prediction), else the one every test task shares; None where the file has neither (or is not there)."""
    import os

    import pyarrow.parquet as pq

    if not os.path.exists(path):
        return None
    names = pq.read_schema(path).names
    return next((c for c in (interval_column(level, task), interval_column(level)) if c in names), None)


def write_intervals(example_ids, widths: dict[float, np.ndarray], out, test_tasks: list[str] = ()) -> None:
    """One seed's conformal half-widths: `example_id`, then `halfwidth_<level>` (the same for every
    test task: the interval of an entry is its prediction ± its column's half-width), or where each test task
    has its own (T, N: a fractional map's, each predicted from its own probes) `<task>:halfwidth_<level>`."""
    import pyarrow as pa

    from ..io import write_table

    columns = {"example_id": pa.array(example_ids.astype(str))}
    for level, width in widths.items():
        if width.ndim == 1:
            columns[interval_column(level)] = pa.array(width, pa.float32())
        else:
            columns.update({interval_column(level, t): pa.array(w, pa.float32()) for t, w in zip(test_tasks, width)})
    write_table(pa.table(columns), out, {"levels": sorted(widths)})


def write_metrics(split_name: str, method: str, metrics: dict[int, dict], out) -> None:
    import pandas as pd

    from ..io import atomic_path

    rows = [{"split": split_name, "method": method, "seed": seed, "metric": name, "value": value}
            for seed, values in metrics.items() for name, value in values.items()]
    with atomic_path(out) as tmp:
        pd.DataFrame(rows).to_csv(tmp, sep="\t", index=False, float_format="%.6g")


def aggregate(tables: list[str]):
    """Mean and (population) std over seeds of every (split, method, metric), as the reference."""
    import pandas as pd

    frame = pd.concat([pd.read_csv(t, sep="\t") for t in tables], ignore_index=True)
    frame = frame.dropna(subset=["value"])
    grouped = frame.groupby(["split", "method", "metric"], sort=False)["value"]
    return pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=0), "n_seeds": grouped.count()}).reset_index()


def _predict_and_write(matrix, definition: dict, method: str, params: dict, settings: dict, out: str, metrics: str,
                       **options) -> dict:
    """Every seed of one split and method: predicted rows into the directory `out`, metrics to `metrics`."""
    from ..io import atomic_path

    per_seed = {}
    with atomic_path(out, directory=True) as out_dir:
        for seed, predictions, known, values, model, widths in iterate_split(
                matrix.values, matrix.tasks, definition["train_tasks"], definition["test_tasks"], method, params,
                settings["k"], list(range(settings["seeds"])), definition["name"],
                {"threshold": settings["threshold"], "q": settings["top_q"], "budget": settings["budget"]}, **options):
            write_seed(matrix.example_ids, definition, settings["method"], seed, predictions, known, model,
                       seed_file(out_dir, seed))
            if widths:
                write_intervals(matrix.example_ids, widths, intervals_file(out_dir, seed), definition["test_tasks"])
            per_seed[seed] = values
    write_metrics(definition["name"], settings["method"], per_seed, metrics)
    return {"split": definition["name"], "method": settings["method"],
            **{k: _finite_mean([m[k] for m in per_seed.values()]) for k in next(iter(per_seed.values()))}}


def _finite_mean(values: list[float]) -> float:
    """The mean over seeds of a metric's finite values; NaN (without numpy's warning) where a method has
    none (RMSE of a ranking or binary method)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def _split_definition(path: str) -> dict:
    import json
    return json.loads(Path(path).read_text())


def predict_command(matrix: str, split: str, settings: dict, out: str, metrics: str,
                    similarity: str | None = None) -> dict:
    """`forgetmap predict`: one split and one method (`settings`: forgetmap.plan), every seed; each
    seed's predicted rows into the directory `out`, per-seed metrics to `metrics`."""
    from ..matrix import ForgettingMatrix
    from ..models import say_device

    say_device("cpu")  # where its time was spent (forgetmap.cost.learned)
    side = np.load(similarity) if similarity else None
    forgetting, definition = ForgettingMatrix.read(matrix), _split_definition(split)
    measured = None
    if forgetting.completed:
        measured = forgetting.measured
        forgetting.values = train_completed(forgetting, definition["train_tasks"])
    return _predict_and_write(forgetting, definition, settings["method"], settings["params"], settings, out, metrics,
                              similarity=side, probes=settings["probes"], intervals=tuple(settings["intervals"]),
                              measured=measured)


def train_completed(matrix, train: list[str]) -> np.ndarray:
    """A fractional map's values with its train rows completed again from their own measured cells alone: the
    map's completion read every row's, the test tasks' too, which a prediction of them must never see. The test
    rows are left as they are: only their measured cells are read (`iterate_split`'s `measured`)."""
    from ..fractional import complete

    rows = [matrix.tasks.index(t) for t in train if t in matrix.tasks]
    values = np.array(matrix.values, dtype=np.float32)
    seed = int((matrix.cells or {}).get("seed", 0))
    values[rows] = complete(values[rows], matrix.measured[rows], matrix.sources, levels=(), seed=seed).values
    return values


# predictors of the 1->0 matrix Y: (completion method, fitted on Y or on Z); the column mean of Y is
# each item's forgetting frequency; mf_thresholded ranks Y's entries by the continuous completion of Z
BINARY_PREDICTORS = {"logistic_mf": ("logistic_mf", "y"), "implicit_als": ("implicit_als", "y"),
                     "column_frequency": ("mean", "y"), "knn": ("knn", "y"), "additive": ("additive", "y"),
                     "mf_thresholded": ("mf", "z")}


def predict_binary_command(forgetting: str, split: str, settings: dict, out: str, metrics: str,
                           matrix: str | None = None) -> dict:
    """`forgetmap predict-binary`: the protocol on Y (only base-correct items count, k of them revealed
    per test task), with the binary metrics (`evaluate_binary`). A Y without enough base-correct items
    is reported in the metrics table, not an error."""
    from ..io import atomic_path
    from ..matrix import ForgettingMatrix
    from .metrics import evaluate_binary

    y = ForgettingMatrix.read(forgetting)
    definition = _split_definition(split)
    method, fitted_on = BINARY_PREDICTORS[settings["method"]]
    source = None
    if fitted_on == "z":
        z = ForgettingMatrix.read(matrix)
        rows = [z.tasks.index(t) for t in y.tasks]
        source = z.values[np.ix_(rows, column_positions(z.example_ids, y.example_ids))]
    params = dict(settings["params"])
    if "threshold" in parameters(method):
        params["threshold"] = 0.5  # Y's 1s
    decision = settings["threshold"] if fitted_on == "z" else (0.0 if method == "logistic_mf" else 0.5)
    usable = int(np.isfinite(y.values).all(axis=0).sum())
    if usable <= settings["k"]:
        import logging
        import pandas as pd

        logging.getLogger(__name__).warning("Y has %d base-correct items, not more than k = %d: nothing to predict",
                                            usable, settings["k"])
        with atomic_path(out, directory=True):
            pass
        with atomic_path(metrics) as tmp:
            pd.DataFrame([{"split": definition["name"], "method": settings["method"], "seed": None,
                           "metric": "base_correct_items", "value": usable}]).to_csv(tmp, sep="\t", index=False)
        return {"split": definition["name"], "method": settings["method"], "base_correct_items": usable}

    def evaluator(pred, truth, hidden, model):
        return evaluate_binary(pred, truth, hidden, decision, settings["budget"])

    return _predict_and_write(y, definition, method, params, settings, out, metrics, source=source,
                              evaluator=evaluator)


def column_positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions of `wanted` ids among `ids` (every one must be there)."""
    import pandas as pd

    at = pd.Index(ids).get_indexer(wanted)
    if (at < 0).any():
        raise DataError(f"example {wanted[np.flatnonzero(at < 0)[0]]!r} of Y is not a column of Z")
    return at


def split_command(split: dict, out: str) -> dict:
    """`forgetmap split-definition`: a configured split's train and test tasks as JSON."""
    import json

    from ..io import atomic_path

    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(split, indent=1))
    return {"train": len(split["train_tasks"]), "test": len(split["test_tasks"])}


def scores_command(metrics: list[str], out: str, figure: str, binary: bool = False) -> dict:
    """`forgetmap prediction-scores`: mean and std over seeds of every split, method and metric
    (`binary`: the figure shows the metrics of Y's prediction)."""
    from .. import plots
    from ..io import atomic_path

    scores = aggregate(metrics)
    with atomic_path(out) as tmp:
        scores.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    shown = {"metrics": ("auprc", "roc_auc", "best_f1", "precision_at_b")} if binary else {}
    plots.prediction_scores(scores, figure, **shown)
    return {"rows": len(scores)}
