"""The prediction protocol (paper §5.1): for each test task, k known columns, the rest predicted.

For each seed, k columns are drawn once with `default_rng(seed)`, *without replacement* (the
reference draws with replacement, so it reveals up to k distinct columns), and revealed for every
test task, as the reference does. Metrics use the hidden entries only. Every method is fitted once
per split on the train rows; each seed is one batched `predict` over all test tasks.

Examples with a NaN in any train or test row are left out of the split (the reference turns NaN into
0; leaving them out never scores a made-up entry); their predictions are NaN.
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError
from .methods import make_method
from .metrics import evaluate


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
    return np.sort(np.random.default_rng(seed).choice(n_examples, k, replace=False))


def run_split(z: np.ndarray, tasks: list[str], train: list[str], test: list[str], method: str, params: dict,
              k: int, seeds: list[int], name: str = "split", metric_options: dict | None = None):
    """Fit `method` on the train rows, predict the test rows for every seed.

    Returns (predictions (S, T, N) float32 with NaN at left-out examples, known (S, k) in the full
    column index, metrics: one dict per seed, the fitted method)."""
    check_split(tasks, train, test, name)
    rows_train = [tasks.index(t) for t in train]
    rows_test = [tasks.index(t) for t in test]
    usable = np.flatnonzero(np.isfinite(z[rows_train + rows_test]).all(axis=0))
    n = len(usable)
    if k >= n:
        raise DataError(f"split {name!r}: k = {k} known columns leaves nothing to predict among {n} usable examples")
    train_z = z[np.ix_(rows_train, usable)].astype(np.float64)
    test_z = z[np.ix_(rows_test, usable)].astype(np.float64)
    model = make_method(method, **params).fit(train_z)
    predictions = np.full((len(seeds), len(test), z.shape[1]), np.nan, dtype=np.float32)
    known_full, metrics = [], []
    for s, seed in enumerate(seeds):
        known = known_columns(n, k, seed)
        known_t = np.broadcast_to(known, (len(test), k))
        pred = model.predict(known_t, test_z[:, known])
        hidden = np.ones_like(test_z, dtype=bool)
        hidden[:, known] = False
        metrics.append(evaluate(pred, test_z, hidden, regression=getattr(model, "regression", True),
                                **(metric_options or {})))
        predictions[s][:, usable] = pred
        known_full.append(usable[known])
    return predictions, np.stack(known_full), metrics, model


def write_outputs(matrix, split: dict, method: str, predictions, known, metrics, out_parquet, out_tsv, model) -> None:
    """Predicted rows (one float32 column per seed and test task) and the per-seed metrics."""
    import pandas as pd
    import pyarrow as pa

    from ..io import atomic_path, write_table

    columns = {"example_id": pa.array(matrix.example_ids.astype(str))}
    for s in range(len(predictions)):
        for t, task in enumerate(split["test_tasks"]):
            columns[f"seed{s}:{task}"] = pa.array(predictions[s, t], pa.float32())
    meta = {"split": split["name"], "method": method, "train_tasks": split["train_tasks"],
            "test_tasks": split["test_tasks"], "known_columns": known.tolist()}
    fitted = {k: v for k, v in vars(model).items() if k.endswith("_") and isinstance(v, (int, float))}
    meta["fitted"] = fitted
    write_table(pa.table(columns), out_parquet, meta)
    rows = [{"split": split["name"], "method": method, "seed": s, "metric": name, "value": value}
            for s, values in enumerate(metrics) for name, value in values.items()]
    with atomic_path(out_tsv) as tmp:
        pd.DataFrame(rows).to_csv(tmp, sep="\t", index=False, float_format="%.6g")


def aggregate(tables: list[str]):
    """Mean and (population) std over seeds of every (split, method, metric), as the reference."""
    import pandas as pd

    frame = pd.concat([pd.read_csv(t, sep="\t") for t in tables], ignore_index=True)
    frame = frame.dropna(subset=["value"])
    grouped = frame.groupby(["split", "method", "metric"], sort=False)["value"]
    return pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=0), "n_seeds": grouped.count()}).reset_index()
