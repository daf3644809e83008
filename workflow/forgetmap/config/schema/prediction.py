"""Predicting forgetting: the splits, the completion methods and their metrics (paper §5), and forecasting a
new task from k scored probes."""

from __future__ import annotations

from ...predict.registry import DEFAULT_METHODS, METHODS
from .fields import NAME, choice, integer, number, obj


SPLIT = obj({
    "test": {"type": ["array", "null"], "items": {"type": "string"}, "default": None,
             "description": "in-domain split: its test tasks; the other tasks of their categories train"},
    "test_category": {"type": ["string", "null"], "default": None,
                      "description": "out-of-domain split: a whole category as test"},
    "train_split": {"type": ["string", "null"], "default": None,
                    "description": "out-of-domain split: the in-domain split whose train tasks train it"},
}, description="a prediction split")

PREDICTION = obj({
    "k": integer(30, "known (measured) examples of each test task", 1),
    "seeds": integer(10, "seeds 0..n-1 of the known-example draw", 1),
    "methods": {"oneOf": [
        {"type": "array", "items": {"enum": list(METHODS)}, "minItems": 1, "uniqueItems": True},
        {"type": "object", "minProperties": 1, "propertyNames": {"enum": list(METHODS)},
         "additionalProperties": {"type": ["object", "null"]}}],
        "default": list(DEFAULT_METHODS),
        "description": "completion methods to evaluate: a list of names, or {name: {parameter: value}} to set "
                       "their hyperparameters (those of each method's class in forgetmap.predict); surprise_* "
                       "need the `reference` extra"},
    "probes": choice("random", ("random", "dopt", "medoids"),
                     "how the k known examples of a test task are chosen, from the train tasks alone: random (the "
                     "paper); dopt (greedy D-optimal design on the fold-in's column factors); medoids (the column "
                     "nearest each k-means centre of the factors)"),
    "intervals": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                  "uniqueItems": True, "default": [0.8, 0.9],
                  "description": "levels of the split-conformal intervals around each predicted entry (leave-one-"
                                 "task-out folds of the train tasks; regression methods); their coverage and width "
                                 "join the prediction metrics; [] for none"},
    "probe_evaluation": obj({
        "method": {"type": "string", "default": "mf", "description": "the completion method the strategies feed"},
        "ks": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "uniqueItems": True,
               "default": [5, 10, 20, 30, 50], "description": "numbers of measured examples compared"},
        "draws": integer(10, "random draws (and k-means starts) per k", 1),
        "strategies": {"type": "array", "items": {"enum": ["random", "dopt", "medoids"]}, "minItems": 1,
                       "uniqueItems": True, "default": ["random", "dopt", "medoids"],
                       "description": "probe strategies compared (random is the baseline)"},
        "reference_k": {"type": ["integer", "null"], "minimum": 1, "default": None,
                        "description": "the k of random probes the others must match (null: prediction.k)"},
    }, description="probe strategies side by side per split: RMSE, top-q F1, precision at the budget and "
                  "interval coverage by k, against random probes (forgetmap.predict.probe_evaluation)", default={}),
    "threshold": number(0.0, "forgotten := Z > threshold for the binary metrics"),
    "top_q": number(0.1, "top-q metric: share of each task's examples counted as most forgotten",
                    exclusive_minimum=0),
    "budget": integer(100, "precision among each task's b highest predictions (a replay budget)", 1),
    "splits": {"type": "object", "propertyNames": {"pattern": NAME}, "additionalProperties": SPLIT,
               "default": {}, "description": "prediction splits by name"},
}, description="forgetting prediction (paper §5)", default={})

FORECAST = obj({
    "k": integer(30, "probe examples scored for each forecast task (the paper's k)", 1),
    "probes": choice("dopt", ("random", "dopt", "medoids"),
                     "how the probes are chosen from the measured tasks' rows: dopt (greedy D-optimal design, each "
                     "column weighted by its noise; it beat random probes on the demo and at paper scale), random "
                     "(the paper), medoids"),
    "method": {"type": "string", "default": "mf",
               "description": "the completion method: a regression method of prediction.methods without side "
                              "information (mean, additive, knn, mf)"},
    "seed": integer(0, "seed of random and medoids probes", 0),
    "audit": integer(60, "examples drawn uniformly at random (with `seed`) from the usable examples that are not "
                     "probes and scored beside them, so each forecast's mean, and each check of a monitored "
                     "fine-tune, is bounded by its own measurements (forgetmap.predict.bound; every other usable "
                     "example where fewer; 0: none, the mean's interval is the fit tasks' constant one). 60: on "
                     "the demo's heavy-tailed forgetting, 30 covered the mean less often than the level "
                     "(BENCHMARKS.md)", 0),
    "generated": {"type": "boolean", "default": False,
                  "description": "the k items forecast with the probes (a corpus with items) include free-form items, "
                                 "answered greedily as the score jobs answer them: a monitored fine-tune decodes them "
                                 "at each check (false: multiple-choice items alone, decided by options)"},
}, description="forecasting a task's forgetting from k scored probes, by a method fitted on the measured tasks",
   default={})
