"""How far each predicted entry may be off: split-conformal intervals from leave-one-task-out folds.

For a prediction from k measured columns, each of up to `folds` train tasks is left out in turn: the
method is fitted on the other train tasks, the left-out task's row is predicted from the same k
columns, and its hidden entries give the conformity scores |z − ẑ| / s_j, where s_j is column j's
standard deviation over the fold's train tasks (columns that vary more across tasks get wider
intervals). The half-width of the interval at level α is q_α · s_j, q_α the ⌈(n + 1) α⌉-th smallest
of the n pooled scores; the test tasks' scale comes from all train tasks. If the test tasks are
exchangeable with the train tasks, a hidden entry of a test task falls inside ẑ ± q_α s_j with
probability about α (marginally over entries; the folds refit on one task fewer, as jackknife+).

The half-width depends on the column only, so one vector per (split, method, seed) holds every test
task's intervals: memory is N floats per level, not T × N. FoldInMF refits a fold from the train
rows' Gram matrix (its `without`), so the folds cost one N × M product each.
"""

from __future__ import annotations

import numpy as np

from .registry import make_method

MAX_FOLDS = 100  # leave-one-task-out over every train task up to this many


class ColumnScale:
    """Each column's standard deviation over the train rows, or over all of them but one, from running
    sums (one pass over the rows; no copy of the matrix per fold), floored at 1e-3 of the median."""

    def __init__(self, rows: np.ndarray):
        self.count = len(rows)
        self.sum = np.zeros(np.shape(rows)[1])
        self.squares = np.zeros(np.shape(rows)[1])
        for row in rows:  # row by row: no float64 copy of the matrix
            row = np.asarray(row, dtype=np.float64)
            self.sum += row
            self.squares += row * row

    @staticmethod
    def _std(total, squares, count):
        mean = total / count
        scale = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
        positive = scale[scale > 0]
        return np.maximum(scale, 1e-3 * (np.median(positive) if len(positive) else 1.0))

    def all(self) -> np.ndarray:
        return self._std(self.sum, self.squares, self.count)

    def without(self, row: np.ndarray) -> np.ndarray:
        row = np.asarray(row, dtype=np.float64)
        return self._std(self.sum - row, self.squares - row * row, self.count - 1)


def fold_rows(m: int, folds: int = MAX_FOLDS, seed: int = 0) -> np.ndarray:
    """Which train rows are left out in turn: all of them, or `folds` of them drawn with `seed`."""
    return np.arange(m) if m <= folds else np.sort(np.random.default_rng(seed).choice(m, folds, replace=False))


def fold_predictions(train: np.ndarray, known: np.ndarray, model, method: str, params: dict,
                     folds: int = MAX_FOLDS):
    """Each left-out train row in turn with its row predicted from its `known` entries by the method fitted
    on the others (its `without` where it has one: no refit)."""
    m = len(train)
    if m < 3:
        raise ValueError(f"conformal intervals need at least 3 train tasks, not {m}")
    for row in fold_rows(m, folds):
        if hasattr(model, "without"):
            fitted = model.without(train, row)
        else:
            fitted = make_method(method, **params).fit(np.delete(train, row, axis=0))
        yield row, fitted.predict(known[None, :], train[row, known][None, :].astype(np.float64))[0]


def conformity_scores(train: np.ndarray, known: np.ndarray, model, method: str, params: dict,
                      scale: ColumnScale | None = None, folds: int = MAX_FOLDS) -> np.ndarray:
    """|z − ẑ| / s over the hidden entries of every left-out train task (float32, pooled)."""
    train = np.asarray(train)
    scale = scale or ColumnScale(train)
    hidden = np.ones(train.shape[1], dtype=bool)
    hidden[known] = False
    scores = np.empty((len(fold_rows(len(train), folds)), int(hidden.sum())), dtype=np.float32)  # one copy in all
    for i, (row, pred) in enumerate(fold_predictions(train, known, model, method, params, folds)):
        scores[i] = (np.abs(train[row] - pred) / scale.without(train[row]))[hidden]
    return scores.reshape(-1)


def fold_mean_errors(train: np.ndarray, known: np.ndarray, model, method: str, params: dict,
                     folds: int = MAX_FOLDS) -> np.ndarray:
    """One pass over the leave-one-task-out folds, for what a completed row's mean needs: each left-out row's
    |mean(z) − mean(ẑ)| over its hidden entries (empty with fewer than 3 fit tasks)."""
    train = np.asarray(train)
    if len(train) < 3:
        return np.zeros(0)
    hidden = np.ones(train.shape[1], dtype=bool)
    hidden[known] = False
    return np.array([abs(float(train[row][hidden].mean()) - float(pred[hidden].mean()))
                     for row, pred in fold_predictions(train, known, model, method, params, folds)])


def mean_halfwidths(errors: np.ndarray, levels: list[float]) -> dict[float, float]:
    """level -> the half-width of an interval around a completed row's mean over its hidden entries: the
    ⌈(n + 1) level⌉-th smallest of the n folds' |mean(z) − mean(ẑ)| (`fold_mean_errors`; inf where too few
    tasks for the level). A row's mean is what a forgetting budget bounds; averaging each entry's interval
    would bound it by a single entry's uncertainty, far wider."""
    return {level: quantile(np.array(errors, dtype=np.float64), level) for level in levels}


def quantile(scores: np.ndarray, level: float) -> float:
    """The ⌈(n + 1) level⌉-th smallest score (inf where n is too small for the level). Reorders
    `scores` in place (a partition: no copy), which leaves any other level's answer unchanged."""
    n = len(scores)
    rank = int(np.ceil((n + 1) * level))
    if rank > n:
        return float("inf")
    scores.partition(rank - 1)
    return float(scores[rank - 1])


def halfwidths(train: np.ndarray, known: np.ndarray, model, method: str, params: dict,
               levels: list[float], scale: ColumnScale | None = None) -> dict[float, np.ndarray]:
    """level -> the interval half-width of every column (float32) for rows predicted from `known`;
    `scale`: the train rows' ColumnScale, if already at hand (it does not depend on `known`)."""
    scale = scale or ColumnScale(train)
    scores = conformity_scores(train, known, model, method, params, scale)
    return {level: (quantile(scores, level) * scale.all()).astype(np.float32) for level in levels}


def coverage(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray, halfwidth: np.ndarray) -> tuple[float, float]:
    """(share of hidden entries inside pred ± halfwidth, mean interval width over them); `halfwidth` one per
    column, or one per entry (T, N: each row predicted from its own probes)."""
    halfwidth = np.atleast_2d(halfwidth)
    inside = np.abs(truth - pred) <= halfwidth
    width = np.broadcast_to(2 * halfwidth, truth.shape)
    return float(inside[hidden].mean()), float(width[hidden].mean())
