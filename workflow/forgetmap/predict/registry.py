"""The one list of completion method names, and building a method from its name and parameters.

The config schema, the reference extra and the workflow read the names from here. Classes are
imported only when a method is built, so reading the names costs nothing at DAG-build time.
"""

from __future__ import annotations

import importlib
import inspect

# name -> (module of this package, class)
METHODS = {
    "mean": ("continuous", "ColumnMean"),
    "additive": ("continuous", "Additive"),
    "knn": ("continuous", "KNNBaseline"),
    "mf": ("continuous", "FoldInMF"),
    "logistic_mf": ("binary", "LogisticMF"),
    "implicit_als": ("binary", "ImplicitALS"),
    "semantic": ("baselines", "SemanticSimilarity"),
    "all_forgotten": ("baselines", "AllForgotten"),
    "random": ("baselines", "RandomScores"),
    # the reference implementation's scikit-surprise methods (optional extra `reference`)
    "surprise_additive": ("reference", "SurpriseAdditive"),
    "surprise_knn": ("reference", "SurpriseKNN"),
    "surprise_svd": ("reference", "SurpriseSVD"),
}
# completion methods of correctness alone (values in [0, 1]): the forgetting monitor's item maps take them, the
# workflow's prediction of Z (nats) does not
ITEM_METHODS = {"irt": ("irt", "ItemResponse")}
REFERENCE_METHODS = tuple(name for name, (module, _) in METHODS.items() if module == "reference")
DEFAULT_METHODS = tuple(name for name in METHODS if name not in REFERENCE_METHODS)
# set by the workflow from other inputs, never from `prediction.methods.<name>`
PROVIDED = ("similarity_train", "similarity_test")


def method_class(name: str) -> type:
    if name not in METHODS and name not in ITEM_METHODS:
        raise KeyError(f"unknown prediction method {name!r}; available: {', '.join(METHODS)} (for correctness "
                       f"also {', '.join(ITEM_METHODS)})")
    module, cls = METHODS.get(name) or ITEM_METHODS[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def parameters(name: str) -> dict[str, object]:
    """The hyperparameters a method takes, with their defaults (inspect.Parameter.empty if none)."""
    signature = inspect.signature(method_class(name).__init__)
    return {p.name: p.default for p in list(signature.parameters.values())[1:]
            if p.name not in PROVIDED and p.kind is p.POSITIONAL_OR_KEYWORD}


def make_method(name: str, **params):
    return method_class(name)(**params)
