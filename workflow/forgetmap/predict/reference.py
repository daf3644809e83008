"""The reference implementation's completion methods, run as its code runs them (paper §5.1-5.2).

scikit-surprise is an optional extra (`pip install "forgetmap[reference]"`): for every test task a
fresh model is fitted on all train entries plus the task's known entries, then every example is
predicted with `algo.predict`, one call per example, as `run_matrix_completion.py` does. This is
the baseline forgetmap's own methods are measured against; it is slow by construction.

- `surprise_additive`: BaselineOnly, SGD, 1,000 epochs (reg 0.02, lr 0.005);
- `surprise_knn`: KNNBaseline with the same baseline options, MSD similarity, user-based, k = 40;
- `surprise_svd`: SVD with 5 factors, 1,000 epochs, lr 0.005, no regularisation, init std 0.001.
"""

from __future__ import annotations

import numpy as np

from .interface import CompletionMethod

BASELINE = {"n_epochs": 1000, "method": "sgd"}


def _algorithm(name: str, seed: int):
    import surprise

    if name == "surprise_additive":
        return surprise.BaselineOnly(bsl_options=dict(BASELINE), verbose=False)
    if name == "surprise_knn":
        return surprise.KNNBaseline(bsl_options=dict(BASELINE), sim_options={"name": "msd", "user_based": True},
                                    verbose=False)
    if name == "surprise_svd":
        # the reference leaves random_state unset (not reproducible); forgetmap seeds it
        return surprise.SVD(n_factors=5, n_epochs=1000, lr_all=0.005, reg_all=0.0, init_std_dev=0.001,
                            random_state=seed)
    raise KeyError(name)


class SurpriseMethod(CompletionMethod):
    """One scikit-surprise algorithm, refitted per test task on train rows + the task's known entries."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def fit(self, train):
        try:
            import surprise  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("the surprise_* methods need the optional extra: "
                               "pip install 'forgetmap[reference]' (scikit-surprise)") from exc
        self.train_ = np.asarray(train, dtype=np.float64)
        return self

    def predict(self, known_columns, known_values):
        import pandas as pd
        import surprise

        m, n = self.train_.shape
        out = np.empty((len(known_columns), n))
        train_triples = pd.DataFrame({"user": np.repeat(np.arange(m), n), "item": np.tile(np.arange(n), m),
                                      "rating": self.train_.ravel()})
        for t, (columns, values) in enumerate(zip(known_columns, known_values)):
            test = pd.DataFrame({"user": m, "item": columns, "rating": values})
            data = surprise.Dataset.load_from_df(pd.concat([train_triples, test], ignore_index=True),
                                                 surprise.Reader(rating_scale=(-100, 100)))
            algo = _algorithm(self.name, self.seed).fit(data.build_full_trainset())
            out[t] = [algo.predict(m, j).est for j in range(n)]
        return out


class SurpriseAdditive(SurpriseMethod):
    name = "surprise_additive"


class SurpriseKNN(SurpriseMethod):
    name = "surprise_knn"


class SurpriseSVD(SurpriseMethod):
    name = "surprise_svd"
