"""Sample-wise correctness of items with an answer: the margin filter and the predictors of Y (Harmon et al.)."""

from __future__ import annotations

from .fields import obj


CORRECTNESS = obj({
    "k": {"type": ["integer", "null"], "minimum": 1, "default": None,
          "description": "revealed base-correct items per test task when predicting Y (null: prediction.k)"},
    "margin": {"type": ["number", "null"], "minimum": 0, "default": None,
               "description": "multiple choice: an item counts as correct only if the gold option wins by at least "
                              "this many nats (the margin filter, a cleaner alternative to chance correction); "
                              "null: the argmax decides"},
    "methods": {"type": "array", "minItems": 1, "uniqueItems": True,
                "items": {"enum": ["logistic_mf", "implicit_als", "column_frequency", "knn", "additive",
                                   "mf_thresholded"]},
                "default": ["logistic_mf", "implicit_als", "column_frequency", "knn", "additive", "mf_thresholded"],
                "description": "predictors of the 1->0 matrix Y evaluated with the prediction protocol "
                               "(mf_thresholded: the continuous completion of Z ranking Y's entries)"},
}, description="sample-wise correctness of upstream items with an answer: 1->0 forgetting and 0->1 backward "
              "transfer (Harmon et al.)", default={})
