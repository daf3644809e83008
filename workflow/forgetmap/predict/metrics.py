"""Prediction metrics over the hidden entries of all test tasks (paper §5.3, plus what replay needs).

- `rmse`: over every hidden entry of every test task.
- `precision`, `recall`, `f1` with forgotten := Z > threshold (0, as the paper), and `roc_auc` of the
  raw predictions against that label.
- `top_q_f1`: forgotten := among the q most forgotten hidden examples of its task; the predicted set
  is the q highest predictions (where most entries are positive the sign alone says little).
- `precision_at_b`: share truly forgotten (Z > threshold) among each task's b highest predictions,
  b being a replay budget, averaged over tasks.
"""

from __future__ import annotations

import numpy as np

METRICS = ("rmse", "precision", "recall", "f1", "roc_auc", "top_q_f1", "precision_at_b")


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting one half (Mann-Whitney);
    NaN when only one class is present. One sort, then linear passes over groups of equal scores."""
    labels = np.asarray(labels, dtype=bool).ravel()
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(np.asarray(scores).ravel())  # ties are grouped below: any order will do
    ordered = np.asarray(scores).ravel()[order]
    positives = labels[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # groups of tied scores
    pos_in_group = np.add.reduceat(positives.astype(np.int64), starts)
    neg_in_group = np.diff(np.r_[starts, ordered.size]) - pos_in_group
    neg_below = np.cumsum(neg_in_group) - neg_in_group
    wins = (pos_in_group * (neg_below + 0.5 * neg_in_group)).sum()
    return float(wins / (n_pos * n_neg))


def _prf(truth: np.ndarray, predicted: np.ndarray) -> tuple[float, float, float]:
    tp = float((truth & predicted).sum())
    precision = tp / predicted.sum() if predicted.any() else 0.0
    recall = tp / truth.sum() if truth.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def _top_mask(values: np.ndarray, hidden: np.ndarray, count: int) -> np.ndarray:
    """Per row, the `count` largest hidden entries."""
    masked = np.where(hidden, values, -np.inf)
    top = np.argpartition(-masked, count - 1, axis=1)[:, :count]
    out = np.zeros_like(hidden)
    np.put_along_axis(out, top, True, axis=1)
    return out & hidden


def evaluate(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray, threshold: float = 0.0,
             q: float = 0.1, budget: int = 100, regression: bool = True) -> dict[str, float]:
    """All metrics for T test rows; `hidden` marks the entries that count (not known, not NaN)."""
    p, t = pred[hidden], truth[hidden]
    out = {"rmse": float(np.sqrt(np.mean((p - t) ** 2))) if regression else float("nan")}
    out["precision"], out["recall"], out["f1"] = _prf(t > threshold, p > threshold)
    out["roc_auc"] = roc_auc(t > threshold, p)
    per_row = int(hidden.sum(axis=1).min())
    count = max(1, int(round(q * per_row)))
    out["top_q_f1"] = _prf(_top_mask(truth, hidden, count)[hidden], _top_mask(pred, hidden, count)[hidden])[2]
    b = max(1, min(budget, per_row))
    chosen = _top_mask(pred, hidden, b)
    out["precision_at_b"] = float(((truth > threshold) & chosen).sum(axis=1).mean() / b)
    return out
