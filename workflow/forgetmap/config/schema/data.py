"""The data a run reads: upstream corpora (a file, generated, or Hugging Face datasets of several parts) and
fine-tuning tasks."""

from __future__ import annotations

import copy

from .fields import choice, integer, number, obj
from .jobs import FINETUNE


def hf_keys(what: str, contract: tuple[str, ...]) -> dict:
    """The keys of `format: hf` (forgetmap.data.hf): a dataset as `datasets.load_dataset` reads it."""
    text = {"type": ["string", "null"], "default": None}
    return {
        "dataset": {**text, "description": f"format hf: a hub id, a local dataset directory, or a builder (json, "
                                           f"parquet, csv) with data_files: the {what}"},
        "name": {**text, "description": "format hf: the dataset's configuration name"},
        "split": {"type": "string", "default": "train", "description": "format hf: the split read"},
        "revision": {**text, "description": "format hf: a commit, branch or tag of a hub dataset (the rows' "
                                            "fingerprint is recorded with what is written)"},
        "data_files": {"type": ["string", "array", "object", "null"], "default": None,
                       "description": "format hf: the files a builder dataset (json, parquet, csv) reads"},
        "where": {"type": "object", "default": {},
                  "additionalProperties": {"type": ["string", "number", "boolean", "array"]},
                  "description": "format hf: keep rows whose column matches: a value, a list of values, or a glob "
                                 "pattern (e.g. {dataset: 'science*'} for Tulu's science subsets)"},
        "messages": {**text, "description": "format hf: a column of chat turns ({role, content}); gives prompt and "
                                            "response (see `turns`)"},
        "turns": choice("first", ("first", "all"), "format hf with messages: first: the first user turn and the "
                                                   "assistant's reply (the paper's Tulu tasks); all: the last assistant "
                                                   "turn as the response, every turn before it as the prompt"),
        "context_template": {"type": "string", "default": "Context: {context}\n\n{prompt}",
                             "description": "format hf: how a non-empty `context` column is folded into the prompt "
                                            "(Dolly)"},
        "columns": obj({c: {"type": "string"} for c in contract}, default={},
                       description="contract column -> the file's or dataset's column (format hf: or a template over "
                                   "its columns, e.g. '{question}\nAnswer:'), where the names differ"),
    }


PART = obj({
    **{k: v for k, v in hf_keys("part", ("example_id", "source", "kind", "text", "prompt", "response", "choices",
                                        "answer")).items() if k not in ("context_template",)},
    "kind": {"enum": ["lm", "chat"], "description": "every row's kind, where the part has no `kind` column"},
    "source": {"type": ["string", "null"], "description": "every row's source label, where the part has no "
                                                          "`source` column (default: the dataset and configuration)"},
}, required=("dataset",), description="one dataset of a corpus of several (format hf with `parts`)")

CORPUS = obj({
    "format": choice("parquet", ("demo", "parquet", "jsonl", "hf"),
                     "demo: generated; parquet/jsonl: a file at `path`; hf: a Hugging Face dataset (`dataset`)"),
    "path": {"type": ["string", "null"], "default": None, "description": "the corpus file (upstream contract)"},
    "n_examples": integer(2400, "demo: examples generated", 1),
    "kind": choice("lm", ("lm", "chat"), "format hf without a `kind` column: every row's kind (chat: prompt and "
                                         "response, or messages)"),
    "source": {"type": ["string", "null"], "default": None,
               "description": "format hf without a `source` column: every row's source label (default: the dataset)"},
    "benchmark_categories": {"type": "object", "default": {},
                             "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                             "description": "benchmark categories of the sources (sub-benchmarks), as Harmon et al. "
                                            "group them: category -> source names or globs (e.g. {math: ['gsm8k', "
                                            "'mmlu_*math*']}); correctness rates are averaged over a category's "
                                            "sources, then over categories; a source no category lists is one"},
    "answers": obj({
        "extract": choice("auto", ("auto", "letter", "choice", "number", "regex", "exact"),
                          "how a sampled answer is read from the generated text: letter (multiple choice, options "
                          "lettered A, B, ... after the prompt), choice (multiple choice whose prompt lists the options: "
                          "the option named by its text), number (GSM8K-style), regex (`pattern`), exact (the text, "
                          "SQuAD-normalised); auto: letter for multiple choice, number where the answer is a number, "
                          "else exact"),
        "pattern": {"type": ["string", "null"], "default": None,
                    "description": "extract regex: the pattern; its first group (or the match) is the answer"},
        "sources": {"type": "object", "default": {},
                    "additionalProperties": obj({
                        "extract": {"enum": ["auto", "letter", "choice", "number", "regex", "exact"]},
                        "pattern": {"type": ["string", "null"]}}),
                    "description": "per source label: its own extract / pattern"},
    }, description="items answered by sampled text (score.correctness.answers: sampled): how the answer is "
                  "extracted, for the corpus and per source", default={}),
    **hf_keys("upstream corpus", ("example_id", "source", "kind", "text", "prompt", "response", "choices", "answer")),
    "parts": {"type": "array", "items": PART, "default": [],
              "description": "format hf: several datasets, one after the other, as one corpus (e.g. MMLU, ARC, "
                             "GSM8K); a key given at the corpus level is shared by every part, a part's own wins"},
}, description="an upstream corpus")

TASK = obj({
    "category": {"type": "string", "description": "a key of `categories`"},
    "format": choice("file", ("file", "hf"), "file: `path` (or the demo generator); hf: a Hugging Face dataset"),
    "path": {"type": ["string", "null"], "default": None,
             "description": "task file (parquet/jsonl/json); null: the demo generator of this name. With `{task}` "
                            "in it, a glob: every matching file is a task named by what `{task}` matched"},
    "validation_path": {"type": ["string", "null"], "default": None,
                        "description": "separate validation file (may use `{task}` as `path` does)"},
    "validation_split": {"type": ["string", "null"], "default": None,
                         "description": "format hf: the dataset split read as validation"},
    "validation_fraction": number(0.1, "share held out as validation when the file has no split", minimum=0),
    "each": {"type": ["string", "null"], "default": None,
             "description": "format hf: one task per distinct value of this column (named by the value), e.g. "
                            "Dolly's category"},
    "n_examples": integer(200, "demo: examples generated", 2),
    "finetune": {**copy.deepcopy(FINETUNE), "description": "overrides of the model's fine-tuning settings"},
    "forecast": {"enum": [False, True, "check", "before"], "default": False,
                 "description": "true: forecast this task's forgetting from k scored probes (one fine-tune, one "
                                "k-example scoring job) instead of scoring it on every upstream shard; check: both, "
                                "the forecast scored against the measurement; before: forecast before any fine-tune, "
                                "from the map and the task's text alone (no fine-tune, no scoring: "
                                "forgetmap.predict.before)"},
    **hf_keys("task", ("prompt", "response", "context")),
}, required=("category",), description="a fine-tuning task (or, with `{task}` in `path` or `each`, a family of them)")

for _p in TASK["properties"]["finetune"]["properties"].values():
    _p.pop("default", None)
