"""A new task's forgetting before its fine-tune (k = 0): its row forecast from the map and the task's own text.

Nothing of the task is measured. What it brings is its text: the cosine between its mean MiniLM embedding and each
upstream example's (s_n, as the semantic analysis computes it). Each example's forecast is its column mean over the
map's rows plus a ridge slope of that column on the rows' own similarities:

    ẑ_n = mean_t Z[t, n] + β_n (s_n − mean_t S[t, n]),   β_n = Σ_t ΔS[t, n] ΔZ[t, n] / (Σ_t ΔS[t, n]² + λ T var(ΔS))

λ is chosen by leave-one-task-out over the map's rows (the least RMSE forecasting each row from the others), and
λ = ∞ (no slope: the column mean, what k = 0 gave before) is among the choices: where the rows say the slopes do not
help, the forecast is the column mean. On the real model's map (BENCHMARKS.md) the slopes beat the column mean on the
row's mean for 12 of 18 held-out tasks and on its Spearman for 15, but on its top 10 % for 8 only.

Intervals come from the same folds: each row forecast from the others gives the conformity scores |z − ẑ| / s_j
(s_j column j's spread over the fold's rows, forgetmap.predict.conformal), pooled; the half-width at level α is their
⌈(n + 1) α⌉-th smallest times s_j. The row's mean: the folds' errors of the mean, its half-width their
⌈(T + 1) α⌉-th smallest, which needs T ≥ α / (1 − α) rows (9 at 0.9); below that the mean's interval is not given.
"""

from __future__ import annotations

import logging

import numpy as np

from .conformal import ColumnScale

log = logging.getLogger(__name__)

SHRINKAGE = (0.0, 0.1, 1.0, 10.0, 100.0, np.inf)  # λ's choices; ∞: the column mean
MIN_ROWS = 3  # rows the folds need: each fold fits a slope on at least two


def slopes(rows: np.ndarray, similarity: np.ndarray, new: np.ndarray, shrinkage: float) -> np.ndarray:
    """The forecast of rows whose similarities are `new` (R x N) from `rows` (T x N) and theirs (T x N)."""
    mean = rows.mean(axis=0)
    if np.isinf(shrinkage):
        return np.broadcast_to(mean, (len(new), len(mean))).copy()
    centre = similarity.mean(axis=0)
    ds = similarity - centre
    beta = (ds * (rows - mean)).sum(axis=0) / ((ds ** 2).sum(axis=0) + shrinkage * len(rows) * ds.var())
    return mean + beta * (new - centre)


def folds(rows: np.ndarray, similarity: np.ndarray, shrinkage: float) -> np.ndarray:
    """Each row forecast from the others (T x N)."""
    return np.stack([slopes(np.delete(rows, t, 0), np.delete(similarity, t, 0), similarity[t:t + 1], shrinkage)[0]
                     for t in range(len(rows))])


def choose_shrinkage(rows: np.ndarray, similarity: np.ndarray, grid=SHRINKAGE) -> float:
    """The λ of `grid` with the least RMSE forecasting each row from the others."""
    errors = [float(np.mean((folds(rows, similarity, lam) - rows) ** 2)) for lam in grid]
    return grid[int(np.argmin(errors))]


def rank_quantile(scores: np.ndarray, level: float) -> float:
    """The ⌈(n + 1) level⌉-th smallest of n scores (split conformal), or NaN where n is too small for the level."""
    rank = int(np.ceil((len(scores) + 1) * level))
    return float(np.sort(scores)[rank - 1]) if 1 <= rank <= len(scores) else float("nan")


def forecast_before(rows: np.ndarray, similarity: np.ndarray, new: np.ndarray, levels: list[float]) -> dict:
    """The forecast rows (R x N float32) of tasks whose similarities are `new`, with each level's per-example
    half-width (N,) and each row's mean with its half-width; NaN half-widths where the map has fewer than
    MIN_ROWS rows (`reason` says why)."""
    rows, similarity, new = (np.asarray(a, dtype=np.float64) for a in (rows, similarity, new))
    if len(rows) < 2:
        raise ValueError(f"a forecast before the fine-tune needs at least 2 rows of the map, got {len(rows)}")
    out = {"levels": list(levels), "reason": None}
    if len(rows) < MIN_ROWS:
        lam = np.inf
        out["reason"] = f"the map has {len(rows)} rows; intervals leave one out of at least {MIN_ROWS}"
    else:
        lam = choose_shrinkage(rows, similarity)
    forecast = slopes(rows, similarity, new, lam)
    out.update(shrinkage=float(lam), rows=forecast.astype(np.float32), means=forecast.mean(axis=1))
    n = rows.shape[1]
    out["halfwidths"] = {level: np.full(n, np.nan) for level in levels}
    out["mean_halfwidths"] = {level: float("nan") for level in levels}
    if out["reason"] is not None:
        return out
    left_out = folds(rows, similarity, lam)
    scale = ColumnScale(rows)
    scores = np.concatenate([np.abs(rows[t] - left_out[t]) / scale.without(rows[t]) for t in range(len(rows))])
    mean_errors = np.abs(left_out.mean(axis=1) - rows.mean(axis=1))
    for level in levels:
        out["halfwidths"][level] = rank_quantile(scores, level) * scale.all()
        out["mean_halfwidths"][level] = rank_quantile(mean_errors, level)
    short = [level for level in levels if np.isnan(out["mean_halfwidths"][level])]
    if short:
        out["reason"] = (f"the row's mean at {', '.join(f'{lv:g}' for lv in short)}: {len(rows)} rows give no "
                         f"interval at that level (⌈(T + 1) level⌉ > T)")
    return out


def before_command(matrix_path: str, shards: list[str], tasks: list[str], settings: dict, threads: int, out: str,
                   summary: str) -> dict:
    """`forgetmap forecast-before`: the tasks marked `forecast: before` (TASK=path of the map's rows and of the new
    tasks), forecast from the map and their text; the rows and half-widths to `out`, one line per task to
    `summary`."""
    import pandas as pd
    import pyarrow as pa

    from ..correlate import matrix_and_upstream, task_arguments, task_similarity
    from ..embed import embed, example_texts
    from ..errors import DataError
    from ..io import atomic_path, write_table
    from ..models import pick_device, set_threads

    set_threads(threads)
    paths = task_arguments(tasks)
    matrix, upstream = matrix_and_upstream(matrix_path, shards)
    missing = [t for t in settings["fit_tasks"] if t not in matrix.tasks]
    if missing:
        raise DataError(f"{matrix_path}: the map has no row {missing[0]!r} to fit the forecast on")
    fit = settings["fit_tasks"]
    device = str(pick_device(settings["device"]))
    examples = embed(example_texts(upstream), settings["batch_size"], device=device)

    def similarity(names):
        return task_similarity(paths, names, examples, settings["batch_size"], settings["max_task_examples"], device)

    new = settings["tasks"]
    result = forecast_before(matrix.values[[matrix.tasks.index(t) for t in fit]], similarity(fit), similarity(new),
                             settings["intervals"])
    if result["reason"]:
        log.warning("forecast before the fine-tune without some intervals: %s", result["reason"])
    columns = {"example_id": pa.array(matrix.example_ids.astype(str)), "source": pa.array(matrix.sources.astype(str))}
    columns.update({t: pa.array(result["rows"][i], pa.float32()) for i, t in enumerate(new)})
    columns.update({f"halfwidth_{lv:g}": pa.array(result["halfwidths"][lv], pa.float32()) for lv in result["levels"]})
    meta = {"tasks": new, "fit_tasks": fit, "method": "similarity slopes", "shrinkage": result["shrinkage"],
            "levels": result["levels"], "reason": result["reason"]}
    table = pd.DataFrame({"task": new, "fit_tasks": len(fit), "shrinkage": result["shrinkage"],
                          "forecast_mean": result["means"],
                          **{f"mean_halfwidth_{lv:g}": result["mean_halfwidths"][lv] for lv in result["levels"]}})
    for lv in result["levels"]:
        table[f"mean_lower_{lv:g}"] = table["forecast_mean"] - table[f"mean_halfwidth_{lv:g}"]
        table[f"mean_upper_{lv:g}"] = table["forecast_mean"] + table[f"mean_halfwidth_{lv:g}"]
    with atomic_path(summary) as tmp:  # both written, or neither: the summary first, the rows renamed last
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
        write_table(pa.table(columns), out, meta)
    return {"tasks": len(new), "fit_tasks": len(fit), "shrinkage": result["shrinkage"],
            "means": [round(float(m), 4) for m in result["means"]]}
