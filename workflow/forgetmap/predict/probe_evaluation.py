"""Probe strategies side by side: does choosing which k examples to measure beat measuring random ones?

For one split and one completion method, every strategy (forgetmap.predict.probes) at every k: the
random draw `draws` times (seeds 0..draws-1), medoids from as many k-means starts, D-optimal once (it
is deterministic). Per test task: RMSE, top-q F1 and precision at the replay budget, each task's value
the mean over the strategy's draws; a strategy is compared with random probes at the same k by a
two-sided Wilcoxon signed-rank test over the test tasks (paired by task). `k_matching_random` is the
smallest k at which a strategy's mean RMSE is at most random probes' at the reference k (the paper's
30): the measurements it saves. With interval levels, the empirical coverage of the conformal
intervals on the test tasks' hidden entries and their mean width, per strategy and k.

Nothing here is tuned on the test tasks: the strategies see the train rows only.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from .metrics import evaluate
from .protocol import iterate_split, prepare_split

log = logging.getLogger(__name__)

PER_TASK = ("rmse", "top_q_f1", "precision_at_b")


def per_task(pred: np.ndarray, truth: np.ndarray, hidden: np.ndarray, options: dict) -> dict[str, np.ndarray]:
    """Each metric of PER_TASK for every test row on its own."""
    rows = [evaluate(pred[t:t + 1], truth[t:t + 1], hidden[t:t + 1], **options) for t in range(len(pred))]
    return {m: np.array([r[m] for r in rows]) for m in PER_TASK}


def evaluate_probes(z: np.ndarray, tasks: list[str], train: list[str], test: list[str], method: str, params: dict,
                    ks: list[int], draws: int, strategies: list[str], options: dict, levels: tuple[float, ...] = (),
                    name: str = "split") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-task values: strategy, k, task, metric, value (mean over draws); coverage: strategy, k,
    level, coverage, width (mean over draws))."""
    usable, _, rows_test, _, _ = prepare_split(z, tasks, train, test, 1, name)
    truth = np.asarray(z[np.ix_(rows_test, usable)], dtype=np.float32)
    records, covered = [], []
    for k in ks:
        if k >= len(usable):
            log.warning("split %s: k = %d leaves nothing to predict among %d examples; skipped", name, k, len(usable))
            continue
        for strategy in strategies:
            seeds = [0] if strategy == "dopt" else list(range(draws))
            values: dict[str, list[np.ndarray]] = {m: [] for m in PER_TASK}
            for _, full, known, metrics, _, _ in iterate_split(z, tasks, train, test, method, params, k, seeds, name,
                                                                options, probes=strategy, intervals=levels):
                hidden = np.ones(truth.shape, dtype=bool)
                hidden[:, np.searchsorted(usable, known)] = False
                for metric, value in per_task(full[:, usable], truth, hidden, options).items():
                    values[metric].append(value)
                for level in levels:
                    if f"coverage_{level:g}" in metrics:
                        covered.append({"strategy": strategy, "k": k, "level": level,
                                        "coverage": metrics[f"coverage_{level:g}"], "width": metrics[f"width_{level:g}"]})
            for metric, per_draw in values.items():
                means = np.mean(per_draw, axis=0)
                records += [{"strategy": strategy, "k": k, "task": task, "metric": metric, "value": float(v)}
                            for task, v in zip(test, means)]
    coverage = pd.DataFrame(covered, columns=["strategy", "k", "level", "coverage", "width"])
    if len(coverage):
        coverage = coverage.groupby(["strategy", "k", "level"], sort=False).mean().reset_index()
    return pd.DataFrame(records, columns=["strategy", "k", "task", "metric", "value"]), coverage


def compare(values: pd.DataFrame, reference_k: int) -> pd.DataFrame:
    """Per (strategy, k, metric): the mean over test tasks, the paired difference to random probes at
    the same k (Wilcoxon over tasks), and each strategy's smallest k matching random at `reference_k`."""
    from ..stats import wilcoxon

    rows = []
    wide = values.pivot_table(index=["metric", "k", "task"], columns="strategy", values="value")
    for (metric, k), part in wide.groupby(level=["metric", "k"], sort=False):
        for strategy in part.columns:
            row = {"strategy": strategy, "k": k, "metric": metric, "mean": float(part[strategy].mean()),
                   "difference_to_random": np.nan, "p_value": np.nan}
            if strategy != "random" and "random" in part:
                d = (part[strategy] - part["random"]).to_numpy()
                row["difference_to_random"] = float(d.mean())
                row["p_value"] = wilcoxon(d)[1]
            rows.append(row)
    table = pd.DataFrame(rows)
    rmse = table[table["metric"] == "rmse"]
    target = rmse[(rmse["strategy"] == "random") & (rmse["k"] == reference_k)]["mean"]
    matching = {}
    for strategy, part in rmse.groupby("strategy", sort=False):
        enough = part[part["mean"] <= target.iloc[0]]["k"] if len(target) else pd.Series(dtype=float)
        matching[strategy] = float(enough.min()) if len(enough) else np.nan
    table["k_matching_random"] = table["strategy"].map(matching)
    return table


def probe_evaluation_command(matrix: str, split: str, settings: dict, out: str, coverage_out: str,
                             figure: str) -> dict:
    """`forgetmap probe-evaluation`: one split, one method, every strategy and k."""
    import json
    from pathlib import Path

    from .. import plots
    from ..io import atomic_path
    from ..matrix import ForgettingMatrix

    forgetting = ForgettingMatrix.read(matrix)
    definition = json.loads(Path(split).read_text())
    # the k random probes are compared at is the protocol's own: with nothing left to predict there, the
    # predict job fails, and so does this one, before writing tables
    prepare_split(forgetting.values, forgetting.tasks, definition["train_tasks"], definition["test_tasks"],
                  settings["reference_k"], definition["name"])
    options = {"threshold": settings["threshold"], "q": settings["top_q"], "budget": settings["budget"]}
    values, coverage = evaluate_probes(forgetting.values, forgetting.tasks, definition["train_tasks"],
                                       definition["test_tasks"], settings["method"], settings["params"], settings["ks"],
                                       settings["draws"], settings["strategies"], options, tuple(settings["intervals"]),
                                       definition["name"])
    table = compare(values, settings["reference_k"])
    table.insert(0, "split", definition["name"])
    coverage.insert(0, "split", definition["name"])
    for frame in (table, coverage):  # a fractional map's test rows are partly completed: said, not hidden
        frame["reads"] = forgetting.reads()
    for frame, path in ((table, out), (coverage, coverage_out)):
        with atomic_path(path) as tmp:
            frame.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    plots.probe_strategies(table, coverage, figure)
    best = table[(table["metric"] == "rmse")].groupby("strategy")["k_matching_random"].first()
    return {"split": definition["name"], **{f"k_matching_random_{s}": v for s, v in best.items()}}
