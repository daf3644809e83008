"""A new checkpoint's forgetting rates from k scored items: what the map of the other checkpoints saves.

A post-trained checkpoint's sampled evaluation generates answers for every item (Harmon et al.: up to
32,768 tokens each, three seeds). Its reference is already evaluated in full, and so are the other rows
of the map. Score only k of its items; complete its row of seed-mean correctness (`after`, rows x items,
in [0, 1]) with a completion method fitted on the measured rows (`forgetmap.predict`), keep the k
measured values, and read the rates off the completed row against the reference's full row:
F = mean_i before_i (1 - after_i), BT = mean_i (1 - before_i) after_i (the expectation of Harmon's
per-seed counts with independently sampled seeds), per source and overall.

`direct` is what k items give without the map: the same rates over the k scored items alone.
"""

from __future__ import annotations

import numpy as np

from ..predict.registry import method_class


def rates(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    """(F, BT) of seed-mean correctness vectors: the expected 1->0 and 0->1 shares."""
    return float(np.mean(before * (1 - after))), float(np.mean((1 - before) * after))


def complete_rows(train: np.ndarray, known_columns: np.ndarray, known_values: np.ndarray, method: str = "additive",
                  params: dict | None = None) -> np.ndarray:
    """Rows of correctness completed from their known items by `method` fitted on `train` (rows x items),
    clipped to [0, 1], the known items kept as measured."""
    model = method_class(method)(**(params or {})).fit(np.asarray(train, dtype=np.float32))
    completed = np.clip(model.predict(known_columns, known_values.astype(np.float32)), 0.0, 1.0)
    rows = np.arange(len(known_columns))[:, None]
    completed[rows, known_columns] = known_values
    return completed


def forecast_rates(train: np.ndarray, before: np.ndarray, known_columns: np.ndarray, known_values: np.ndarray,
                   method: str = "additive", params: dict | None = None) -> np.ndarray:
    """(T, 2) forecast (F, BT) of T new rows from their known items, each against the reference `before`
    (items,) or one per row (T, items)."""
    completed = complete_rows(train, known_columns, known_values, method, params)
    before = np.broadcast_to(np.atleast_2d(before), completed.shape)
    return np.array([rates(b, a) for b, a in zip(before, completed)])


def direct_rates(before: np.ndarray, after: np.ndarray, known_columns: np.ndarray) -> np.ndarray:
    """(T, 2) the rates over the known items alone (no map): the estimate k scored items give by themselves."""
    before = np.broadcast_to(np.atleast_2d(before), after.shape)
    return np.array([rates(b[c], a[c]) for b, a, c in zip(before, after, known_columns)])
