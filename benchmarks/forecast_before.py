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
from forgetmap.predict.before import forecast_before
from forgetmap.predict.interface import sample_columns
from forgetmap.predict.metrics import evaluate
from forgetmap.predict.registry import make_method

TEMPERATURES = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, np.inf)  # inf: equal weights, the column mean


def profile_weighted(train: np.ndarray, s_train: np.ndarray, s_new: np.ndarray, temperature: float) -> np.ndarray:
    """Tried, not shipped: the training rows weighted by softmax(corr(task's similarity profile, theirs) / T)."""
    if np.isinf(temperature):
        return train.mean(axis=0)
    a = (s_train - s_train.mean(axis=1, keepdims=True)) / s_train.std(axis=1, keepdims=True)
    b = (s_new - s_new.mean()) / s_new.std()
    corr = a @ b / len(b)
    w = np.exp((corr - corr.max()) / temperature)
    return (w / w.sum()) @ train


def inner_temperature(train: np.ndarray, s_train: np.ndarray) -> float:
    """The temperature with the least RMSE forecasting each training task from the others."""
    errors = [np.mean([np.mean((profile_weighted(np.delete(train, i, 0), np.delete(s_train, i, 0), s_train[i], t)
                                - train[i]) ** 2) for i in range(len(train))]) for t in TEMPERATURES]
    return TEMPERATURES[int(np.argmin(errors))]


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
        t = inner_temperature(train, s_train)
        shipped = forecast_before(train, s_train, s[i][None], [0.8, 0.9])  # forgetmap.predict.before: the workflow's
        forecasts = {"column mean (k = 0)": train.mean(axis=0),
                     "similarity-weighted rows (k = 0)": profile_weighted(train, s_train, s[i], t),
                     "similarity slopes (k = 0, forecast: before)": shipped["rows"][0].astype(np.float64)}
        for name, pred in forecasts.items():
            row = {"task": task, "method": name, **scores(pred, z[i])}
            if "slopes" in name:
                row.update(chosen=shipped["shrinkage"], **{
                    f"mean_covered_{lv:g}": float(abs(shipped["means"][0] - z[i].mean()) <= shipped["mean_halfwidths"][lv])
                    for lv in (0.8, 0.9)}, **{f"entries_covered_{lv:g}": float(np.mean(
                        np.abs(pred - z[i]) <= shipped["halfwidths"][lv])) for lv in (0.8, 0.9)})
            elif "weighted" in name:
                row["chosen"] = t
            rows.append(row)
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
    shipped = table[table["method"].str.contains("slopes")]
    print("forecast: before, its intervals over the 18 held-out tasks: the row's mean inside its 80 % / 90 % interval "
          f"for {int(shipped['mean_covered_0.8'].sum())} / {int(shipped['mean_covered_0.9'].sum())}; entries inside "
          f"theirs {shipped['entries_covered_0.8'].mean():.3f} / {shipped['entries_covered_0.9'].mean():.3f}")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
