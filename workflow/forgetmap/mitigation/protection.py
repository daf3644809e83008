"""Which examples each method protected, against the examples the matrix predicted would be forgotten.

For every fine-tune as trained (α = 1) at a task and seed, an example's protection is plain fine-tuning's
forgetting minus the method's, ΔNLL_none − ΔNLL_arm (= NLL_none − NLL_arm: the base's NLL cancels), over
the held-out examples. Beside it, the task's predicted forgetting of the same examples: the row the
explorer's completion method predicted for the task (its split's prediction, seed 0), from k measured
examples and the other tasks' rows. Per (fine-tune, task, seed): Spearman's ρ between the two; the mean
protection on the tenth of the examples predicted most forgotten and on the rest; and the share of all
positive protection that falls on that tenth (0.1 if a method protected blindly). A method aimed by the
prediction (predicted replay) should protect where the prediction points; an anchor protects everywhere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_ARM = "none"
TOP = 0.1


def predicted_row(directory: str, task: str, seed: int = 0) -> pd.Series:
    """The task's predicted forgetting by example id (a prediction directory's seed file)."""
    frame = pd.read_parquet(f"{directory}/seed-{seed}.parquet", columns=["example_id", task])
    return frame.set_index("example_id")[task].astype(np.float64)


def protection_row(protected: np.ndarray, predicted: np.ndarray) -> dict:
    """ρ, the mean protection on the top tenth predicted and elsewhere, and the top tenth's share."""
    from scipy.stats import spearmanr

    keep = np.isfinite(protected) & np.isfinite(predicted)
    x, p = protected[keep], predicted[keep]
    if len(x) < 10 or np.ptp(x) == 0 or np.ptp(p) == 0:
        return {"examples": int(len(x)), "spearman": np.nan, "protection_top": np.nan, "protection_rest": np.nan,
                "top_share": np.nan}
    top = p >= np.quantile(p, 1 - TOP)
    positive = np.clip(x, 0, None)
    return {"examples": int(len(x)), "spearman": float(spearmanr(x, p).statistic),
            "protection_top": float(x[top].mean()), "protection_rest": float(x[~top].mean()),
            "top_share": float(positive[top].sum() / positive.sum()) if positive.sum() > 0 else np.nan}


def value_key(value: float) -> str:
    """A knob value as a dictionary key (NaN, an arm without a knob, included)."""
    return "-" if pd.isna(value) else f"{float(value):g}"


def protection_table(runs: list[dict], predictions: dict[str, str], labels: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Per fine-tune as trained, task and seed, where the task has a prediction; `labels` names each
    (arm, value_key) as the summary does."""
    from .evaluate import read_variants

    trained = {}
    for run in runs:
        for (value, alpha), scores in read_variants(run["scores"], False):
            if alpha == 1.0:
                trained.setdefault((run["task"], run["seed"]), []).append(
                    (run["arm"], value, scores.set_index("example_id")["nll"].astype(np.float64)))
    rows = []
    for (task, seed), tunes in trained.items():
        if task not in predictions:
            continue
        predicted = predicted_row(predictions[task], task)
        plain = next(nll for arm, _, nll in tunes if arm == NO_ARM)
        for arm, value, nll in tunes:
            if arm == NO_ARM:
                continue
            protected = (plain - nll.reindex(plain.index)).to_numpy()
            rows.append({"arm": labels[(arm, value_key(value))], "task": task, "seed": seed,
                         **protection_row(protected, predicted.reindex(plain.index).to_numpy())})
    return pd.DataFrame(rows, columns=["arm", "task", "seed", "examples", "spearman", "protection_top",
                                       "protection_rest", "top_share"])
