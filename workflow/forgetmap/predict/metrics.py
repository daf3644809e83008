"""Prediction metrics over the hidden entries of all test tasks (paper §5.3, plus what replay needs).

- `rmse`: over every hidden entry of every test task.
- `precision`, `recall`, `f1` with forgotten := Z > threshold (0, as the paper), and `roc_auc` of the
  raw predictions against that label.
- `top_q_f1`: forgotten := among the q most forgotten hidden examples of its task; the predicted set
  is the q highest predictions (where most entries are positive the sign alone says little).
- `precision_at_b`: share truly forgotten (Z > threshold) among each task's b highest predictions,
  b being a replay budget, averaged over tasks.

Ties in a top selection go to the lower example index, so a constant prediction selects exactly
`count` examples per task, as any other does. ROC-AUC sorts the pooled scores of each class and counts
pairs with `searchsorted`; the rest is per-row partitions: no per-entry index arrays anywhere.
"""

from __future__ import annotations

import numpy as np

from ..matrix import forgotten as is_forgotten

METRICS = ("rmse", "precision", "recall", "f1", "roc_auc", "top_q_f1", "precision_at_b")
_CHUNK = 1 << 18  # searchsorted queries at a time: bounds its int64 output


def _pairs_below(sorted_values: np.ndarray, sorted_queries: np.ndarray) -> int:
    """Σ over queries of the number of values strictly below it."""
    return sum(int(np.searchsorted(sorted_values, sorted_queries[i:i + _CHUNK], "left").sum(dtype=np.int64))
               for i in range(0, len(sorted_queries), _CHUNK))


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting one half (Mann-Whitney);
    NaN when only one class is present."""
    labels = np.asarray(labels, dtype=bool).ravel()
    scores = np.asarray(scores).ravel()
    return _auc(scores[labels], scores[~labels])


def _auc(positives: np.ndarray, negatives: np.ndarray) -> float:
    """roc_auc from the two classes' scores (sorted in place): pairs won + lost + tied = P x N."""
    if len(positives) == 0 or len(negatives) == 0:
        return float("nan")
    positives.sort()
    negatives.sort()
    total = len(positives) * len(negatives)
    won = _pairs_below(negatives, positives)
    lost = _pairs_below(positives, negatives)
    return float((won + 0.5 * (total - won - lost)) / total)


def _prf(true_positives: int, predicted: int, actual: int) -> tuple[float, float, float]:
    precision = true_positives / predicted if predicted else 0.0
    recall = true_positives / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return float(precision), float(recall), float(f1)


def _top(values: np.ndarray, count: int) -> np.ndarray:
    """Mask of the `count` largest of a 1-D array, ties to the lower index (a constant array selects
    exactly `count` too)."""
    cut = np.partition(values, len(values) - count)[len(values) - count]
    chosen = values > cut
    short = count - int(np.count_nonzero(chosen))
    chosen[np.flatnonzero(values == cut)[:short]] = True
    return chosen


def evaluate(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray, threshold: float = 0.0,
             q: float = 0.1, budget: int = 100, regression: bool = True) -> dict[str, float]:
    """All metrics for T test rows; `hidden` marks the entries that count (not known, not NaN).

    One pass over the rows: per-row sums for RMSE, the confusion counts and the top selections, and
    each row's scores appended to the pooled positive / negative arrays that ROC-AUC sorts. Beyond
    those two arrays (together one float32 copy of the hidden entries) memory is a few rows."""
    forgotten = is_forgotten(truth, threshold)
    n_positive = int(np.count_nonzero(forgotten & hidden))
    positives = np.empty(n_positive, dtype=np.float32)
    negatives = np.empty(int(np.count_nonzero(hidden)) - n_positive, dtype=np.float32)
    per_row = int(hidden.sum(axis=1).min())
    count = max(1, int(round(q * per_row)))
    b = max(1, min(budget, per_row))
    squares = 0.0
    confusion = np.zeros(3, dtype=np.int64)  # true positives, predicted positives, actual positives
    top_q = np.zeros(3, dtype=np.int64)      # the same for the top-q selections
    hits_at_b = 0
    n_pos = n_neg = 0
    for row in range(len(pred)):
        keep = hidden[row]
        p, t, f = pred[row][keep], truth[row][keep], forgotten[row][keep]
        if regression:
            diff = p.astype(np.float64) - t
            squares += float(diff @ diff)
        predicted = is_forgotten(p, threshold)
        confusion += (np.count_nonzero(f & predicted), np.count_nonzero(predicted), np.count_nonzero(f))
        most_forgotten, predicted_top = _top(t, count), _top(p, count)
        top_q += (np.count_nonzero(most_forgotten & predicted_top), count, count)
        hits_at_b += int(np.count_nonzero(f[_top(p, b)]))
        pos, neg = p[f], p[~f]
        positives[n_pos:n_pos + len(pos)], negatives[n_neg:n_neg + len(neg)] = pos, neg
        n_pos, n_neg = n_pos + len(pos), n_neg + len(neg)
    out = {"rmse": float(np.sqrt(squares / (n_pos + n_neg))) if regression else float("nan")}
    out["precision"], out["recall"], out["f1"] = _prf(*confusion)
    out["roc_auc"] = _auc(positives, negatives)
    out["top_q_f1"] = _prf(*top_q)[2]
    out["precision_at_b"] = hits_at_b / (b * len(pred))
    return out


BINARY_METRICS = ("auprc", "roc_auc", "best_f1", "f1_at_0.5", "precision_at_b", "positive_rate")


def _pooled_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(true positives, predicted positives) at each distinct score threshold, highest first."""
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last = np.r_[np.flatnonzero(np.diff(scores) != 0), len(scores) - 1]  # a tie is one threshold
    true_positives = np.cumsum(labels)[last]
    return true_positives.astype(np.float64), (last + 1).astype(np.float64)


def evaluate_binary(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray, decision: float = 0.5,
                    budget: int = 100) -> dict[str, float]:
    """Metrics of scores for a 0/1 matrix (Y) over the hidden entries of all test rows, pooled:
    `auprc` (average precision, ties one threshold), `roc_auc`, `best_f1` (over every threshold),
    `f1_at_0.5` (positive := score > `decision`: 0 for logits, 0.5 for probabilities), and
    `precision_at_b` (share of 1s among each row's b highest scores, averaged over rows)."""
    labels = truth[hidden] > 0.5
    scores = pred[hidden].astype(np.float64)
    out = {name: float("nan") for name in BINARY_METRICS}
    out["positive_rate"] = float(labels.mean()) if labels.size else float("nan")
    if labels.size == 0:
        return out
    out["roc_auc"] = roc_auc(labels, scores)
    positives = int(labels.sum())
    if positives:
        tp, pp = _pooled_curve(scores, labels)
        precision, recall = tp / pp, tp / positives
        out["auprc"] = float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
        out["best_f1"] = float(f1.max())
    out["f1_at_0.5"] = _prf(int(np.count_nonzero(labels & (scores > decision))), int(np.count_nonzero(scores > decision)),
                            positives)[2]
    hits, total = 0, 0
    for row in range(len(pred)):
        keep = hidden[row]
        if not keep.any():
            continue
        b = max(1, min(budget, int(keep.sum())))
        hits += int(np.count_nonzero(truth[row][keep][_top(pred[row][keep].astype(np.float64), b)] > 0.5))
        total += b
    out["precision_at_b"] = hits / total if total else float("nan")
    return out
