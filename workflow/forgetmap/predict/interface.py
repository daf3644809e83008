"""The interface every completion method shares, in the style of scikit-learn.

Hyperparameters go to `__init__`, `fit(train)` learns from the rows of known tasks (fitted state in
attributes ending in `_`), and `predict(known_columns, known_values)` folds in many new tasks at once
from their known entries and returns their full rows. `regression = False` marks a method whose scores
only rank examples (its RMSE is not reported).
"""

from __future__ import annotations

import numpy as np


class CompletionMethod:
    """fit(train (M, N)) -> self; predict(known_columns (T, k) int, known_values (T, k)) -> (T, N)."""

    name = "base"
    regression = True  # False: a baseline for the binary metrics only (its RMSE is not reported)

    def fit(self, train: np.ndarray) -> "CompletionMethod":
        raise NotImplementedError

    def predict(self, known_columns: np.ndarray, known_values: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def sample_columns(n: int, count: int, seed) -> np.ndarray:
    """`count` sorted random examples of n (all of them when n <= count); `seed` an int or a Generator."""
    if n <= count:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, count, replace=False))
