"""The explorer: one offline page per model linking its matrix to its examples."""

from __future__ import annotations

from .fields import integer, obj


EXPLORER = obj({
    "examples_per_task": integer(50, "a task's most forgotten examples carried in full (and 20 most improved)", 1),
    "columns": integer(240, "bins of examples in the overview (per source, ordered by the leading component)", 1),
    "method": {"type": "string", "default": "mf",
               "description": "the prediction shown beside each split's test tasks (a configured method; seed 0)"},
}, description="the explorer: one offline HTML page per model linking its matrix to its examples",
   default={})
