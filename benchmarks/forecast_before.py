"""A new task's forgetting before its fine-tune (k = 0), judged leave-one-task-out on a map: each task's row is
forecast from the other tasks' rows and the task's own data only, against the column mean (what k = 0 gives
without the task's data) and against k = 30 after the fine-tune (the paper's protocol: 30 measured examples
completed by mf). Per held-out task: Spearman with the true row, top-10 % F1, the error of the row's mean.

The task's own data enters through its semantic similarity to each upstream example (MiniLM, the workflow's
results/MODEL/correlations/semantic_similarity.npy, tasks x examples in matrix order). Every hyperparameter is
chosen by an inner leave-one-out over the training tasks alone, never on the held-out task.

    python benchmarks/forecast_before.py --matrix results/smollm2_map/forgetting.parquet \\
        --similarity results/smollm2_map/correlations/semantic_similarity.npy
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from forgetmap.matrix import ForgettingMatrix
from forgetmap.predict.interface import sample_columns
from forgetmap.predict.metrics import evaluate
from forgetmap.predict.registry import make_method

TEMPERATURES = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, np.inf)  # inf: equal weights, the column mean
SHRINKAGE = (0.0, 0.1, 1.0, 10.0, 100.0, np.inf)        # inf: no slope, the column mean


def profile_weighted(train: np.ndarray, s_train: np.ndarray, s_new: np.ndarray, temperature: float) -> np.ndarray:
    """The training rows weighted by softmax(corr(task's similarity profile, theirs) / temperature)."""
    if np.isinf(temperature):
        return train.mean(axis=0)
    a = (s_train - s_train.mean(axis=1, keepdims=True)) / s_train.std(axis=1, keepdims=True)
    b = (s_new - s_new.mean()) / s_new.std()
    corr = a @ b / len(b)
    w = np.exp((corr - corr.max()) / temperature)
    return (w / w.sum()) @ train


def slopes(train: np.ndarray, s_train: np.ndarray, s_new: np.ndarray, shrinkage: float) -> np.ndarray:
    """Each example's column mean plus a ridge slope of its forgetting on the task's similarity to it."""
    mean = train.mean(axis=0)
    if np.isinf(shrinkage):
        return mean
    ds = s_train - s_train.mean(axis=0)
    beta = (ds * (train - mean)).sum(axis=0) / ((ds ** 2).sum(axis=0) + shrinkage * len(train) * ds.var())
    return mean + beta * (s_new - s_train.mean(axis=0))


def inner_choice(forecast, train: np.ndarray, s_train: np.ndarray, grid) -> float:
    """The grid value with the least RMSE forecasting each training task from the others."""
    errors = []
    for value in grid:
        err = [np.mean((forecast(np.delete(train, i, 0), np.delete(s_train, i, 0), s_train[i], value) - train[i]) ** 2)
               for i in range(len(train))]
        errors.append(np.mean(err))
    return grid[int(np.argmin(errors))]


def scores(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray | None = None) -> dict[str, float]:
    keep = np.ones_like(truth, dtype=bool) if hidden is None else hidden
    top = evaluate(pred[None], truth[None], keep[None], q=0.1)["top_q_f1"]
    return {"spearman": float(spearmanr(pred[keep], truth[keep]).statistic), "top10_f1": top,
            "mean_error": float(abs(pred[keep].mean() - truth[keep].mean()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrix", required=True)
    parser.add_argument("--similarity", required=True)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    m = ForgettingMatrix.read(args.matrix)
    z = m.values.astype(np.float64)
    s = np.load(args.similarity).astype(np.float64)
    rows = []
    for i, task in enumerate(m.tasks):
        train, s_train = np.delete(z, i, 0), np.delete(s, i, 0)
        t = inner_choice(profile_weighted, train, s_train, TEMPERATURES)
        lam = inner_choice(slopes, train, s_train, SHRINKAGE)
        forecasts = {"column mean (k = 0)": train.mean(axis=0),
                     f"similarity-weighted rows (k = 0)": profile_weighted(train, s_train, s[i], t),
                     f"per-example similarity slopes (k = 0)": slopes(train, s_train, s[i], lam)}
        for name, pred in forecasts.items():
            rows.append({"task": task, "method": name, **scores(pred, z[i]),
                         "chosen": t if "weighted" in name else lam if "slopes" in name else None})
        method = make_method("mf").fit(train.astype(np.float32))
        after = []
        for seed in range(args.seeds):
            known = sample_columns(z.shape[1], args.k, seed)
            pred = method.predict(known[None], z[i, known][None].astype(np.float32))[0].astype(np.float64)
            hidden = np.ones(z.shape[1], dtype=bool)
            hidden[known] = False
            after.append(scores(pred, z[i], hidden))
        rows.append({"task": task, "method": f"mf from {args.k} measured (after the fine-tune)",
                     **pd.DataFrame(after).mean().to_dict()})
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(table.groupby("method", sort=False)[["spearman", "top10_f1", "mean_error"]].agg(["mean", "median"])
          .round(3).to_string())
    base = table[table["method"] == "column mean (k = 0)"].set_index("task")
    for name in table["method"].unique()[1:]:
        other = table[table["method"] == name].set_index("task")
        print(f"{name}: beats the column mean on the row's mean for {(other['mean_error'] < base['mean_error']).sum()}"
              f" of {len(base)} tasks, on top-10 % F1 for {(other['top10_f1'] > base['top10_f1']).sum()} (equal for "
              f"{(other['top10_f1'] == base['top10_f1']).sum()}), on Spearman "
              f"for {(other['spearman'] > base['spearman']).sum()}")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
