"""Low-rank structure of the binary forgetting matrix Y, beside the SVD of Z (paper §3.2; related §3.2).

- Logistic MF fitted in sample on the observed entries of Y (the base-correct items): P(Y = 1) =
  σ(μ + a_task + b_item + u_taskᵀ v_item) at rank r = 0 (offsets only) .. max_rank, L2 penalty `reg`
  on every parameter but μ, L-BFGS. Per rank: deviance explained, 1 - D(r) / D(null), D(null) the
  deviance of the overall rate; F1 at σ > 0.5 (the paper's table: 0.506 -> 0.707 from rank 1 to 5 on
  OLMo-7B-Instruct); ROC-AUC of the fitted probabilities.
- Beside it the SVD R² of Z at the same ranks, on all of Z and on Y's observed entries.
- The point-biserial correlation between Z and Y (Pearson over the observed entries of Y), overall
  and per task: does a larger loss increase go with losing the answer?
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from ..lowrank import r2_by_rank
from ..matrix import ForgettingMatrix
from ..predict.metrics import roc_auc

log = logging.getLogger(__name__)


def bernoulli_deviance(y: np.ndarray, logits: np.ndarray) -> float:
    return float(-2 * (y * log_expit(logits) + (1 - y) * log_expit(-logits)).sum())


def fit_logistic(y: np.ndarray, rank: int, reg: float = 1e-2, max_iter: int = 500, seed: int = 0) -> np.ndarray:
    """In-sample logits of a rank-r logistic MF of a fully observed 0/1 matrix (M, N)."""
    m, n = y.shape
    rng = np.random.default_rng(seed)
    rate = np.clip(y.mean(), 1e-6, 1 - 1e-6)
    x0 = np.concatenate([[np.log(rate / (1 - rate))], np.zeros(m + n), rng.normal(0, 0.1, (m + n) * rank)])

    def unpack(x):
        mu, a, b = x[0], x[1:1 + m], x[1 + m:1 + m + n]
        u = x[1 + m + n:1 + m + n + m * rank].reshape(m, rank)
        v = x[1 + m + n + m * rank:].reshape(n, rank)
        return mu, a, b, u, v

    def objective(x):
        mu, a, b, u, v = unpack(x)
        logits = mu + a[:, None] + b[None, :] + u @ v.T
        p = expit(logits)
        loss = -(y * log_expit(logits) + (1 - y) * log_expit(-logits)).sum() + 0.5 * reg * (x[1:] @ x[1:])
        g = p - y
        grad = np.concatenate([[g.sum()], g.sum(1), g.sum(0), (g @ v).ravel(), (g.T @ u).ravel()]) + reg * np.r_[0, x[1:]]
        return loss, grad

    result = minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    mu, a, b, u, v = unpack(result.x)
    return mu + a[:, None] + b[None, :] + u @ v.T


def logistic_by_rank(y: np.ndarray, max_rank: int) -> pd.DataFrame:
    """Deviance explained, F1 at 0.5 and ROC-AUC of the in-sample fit at ranks 0..max_rank."""
    rate = np.clip(y.mean(), 1e-12, 1 - 1e-12)
    null = bernoulli_deviance(y, np.full(y.shape, np.log(rate / (1 - rate))))
    rows = []
    for rank in range(0, max_rank + 1):
        logits = fit_logistic(y, rank)
        predicted = logits > 0
        tp, pp, ap = int((predicted & (y == 1)).sum()), int(predicted.sum()), int((y == 1).sum())
        precision, recall = (tp / pp if pp else 0.0), (tp / ap if ap else 0.0)
        rows.append({"rank": rank, "deviance_explained": 1 - bernoulli_deviance(y, logits) / null if null > 0 else np.nan,
                     "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
                     "precision": precision, "recall": recall, "roc_auc": roc_auc(y == 1, logits)})
    return pd.DataFrame(rows)


def point_biserial(z: np.ndarray, y: np.ndarray, tasks: list[str]) -> pd.DataFrame:
    """Pearson r between Z and Y over Y's observed entries: overall and per task."""
    def r(zs, ys):
        keep = np.isfinite(zs) & np.isfinite(ys)
        if keep.sum() < 3 or np.ptp(ys[keep]) == 0 or np.ptp(zs[keep]) == 0:
            return np.nan, int(keep.sum())
        return float(np.corrcoef(zs[keep], ys[keep])[0, 1]), int(keep.sum())

    rows = [{"scope": "all", **dict(zip(("r", "n"), r(z.ravel(), y.ravel())))}]
    rows += [{"scope": task, **dict(zip(("r", "n"), r(z[i], y[i])))} for i, task in enumerate(tasks)]
    return pd.DataFrame(rows)


def _by_rank(r2: np.ndarray, n: int) -> np.ndarray:
    """R² at ranks 0..n-1 (0 at rank 0; NaN past the matrix's rank)."""
    return np.r_[0.0, r2, np.full(n, np.nan)][:n]


def analyse(z: ForgettingMatrix | None, y: ForgettingMatrix,
            max_rank: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rank table: logistic fit of Y beside the SVD R² of Z, point-biserial table over Z's rows). Without Z
    (an imported binary matrix) the Z columns and the correlations are NaN; rows of Y that Z lacks (eval
    logs) join the logistic fit only."""
    observed = np.isfinite(y.values).all(axis=0)  # base-correct items: observed in every row
    max_rank = min(max_rank, len(y.tasks) - 1, max(0, int(observed.sum()) - 1))
    if observed.sum() == 0 or np.ptp(y.values[:, observed]) == 0:
        log.warning("Y has %d observed items and %s: no logistic fit", int(observed.sum()),
                    "no 1->0 transition" if observed.any() else "no base-correct item")
        table = pd.DataFrame({"rank": range(max_rank + 1)})
    else:
        table = logistic_by_rank(y.values[:, observed].astype(np.float64), max_rank)
    if z is None:
        table["z_r2"] = table["z_r2_base_correct_items"] = np.nan
        nan = np.full(y.values.shape, np.nan)
        return table, point_biserial(nan, y.values, y.tasks)
    if [t for t in y.tasks if t in z.tasks] != z.tasks:  # Y may have more rows: imported eval logs have no Z
        raise ValueError("Y must hold Z's tasks in Z's order")
    rows = [y.tasks.index(t) for t in z.tasks]
    columns = pd.Index(z.example_ids).get_indexer(y.example_ids)
    if (columns < 0).any():
        raise ValueError("Y has items that are not columns of Z")
    z_items = z.values[:, columns]
    r2_all = r2_by_rank(np.nan_to_num(z.values), max_rank) if max_rank else np.zeros(0)
    r2_items = r2_by_rank(np.nan_to_num(z_items[:, observed]), max_rank) if max_rank and observed.any() else np.zeros(0)
    table["z_r2"] = _by_rank(r2_all, len(table))
    table["z_r2_base_correct_items"] = _by_rank(r2_items, len(table))
    return table, point_biserial(z_items, y.values[rows], z.tasks)


def lowrank_binary_command(matrix: str | None, forgetting: str, outputs: dict) -> dict:
    """`forgetmap lowrank-binary`: the rank table, the point-biserial table and their figure (`matrix`
    None: a model without Z)."""
    from .. import plots
    from ..io import atomic_path

    z, y = None if matrix is None else ForgettingMatrix.read(matrix), ForgettingMatrix.read(forgetting)
    table, correlation = analyse(z, y)
    with atomic_path(outputs["ranks"]) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    with atomic_path(outputs["point_biserial"]) as tmp:
        correlation.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    plots.binary_ranks(table, float(correlation["r"].iloc[0]), outputs["figure"])
    return {"ranks": len(table), "point_biserial": float(correlation["r"].iloc[0])}
