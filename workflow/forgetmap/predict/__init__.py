"""Forgetting prediction: complete a new task's row of Z from a few measured examples (paper §5).

Methods share one small interface in the style of scikit-learn: hyperparameters in `__init__`,
`fit(train)` on the M_train x N matrix of known tasks, then `predict(known_columns, known_values)`
returning full rows for many new tasks at once (T x N from T x k).
"""

from .registry import METHODS, make_method

__all__ = ["METHODS", "make_method"]
