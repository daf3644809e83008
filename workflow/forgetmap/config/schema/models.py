"""A model: computed (its base, jobs and resources), or imported (a released matrix); its checkpoints (public
post-trained models) and their evaluation logs."""

from __future__ import annotations

from .fields import NAME, choice, integer, obj, resources
from .jobs import BASE, CORRELATIONS, FINETUNE, SCORE


IMPORTED = obj({
    "matrix": {"type": "string", "description": "released Z as .npy (tasks x examples)"},
    "statistic": choice("nll_change", ("nll_change", "forgotten_1to0"),
                        "what the .npy holds: nll_change, the forgetting Z (the analyses and prediction of Z run on "
                        "it); forgotten_1to0, the binary Y (1 = an item the base answered right is answered wrong, 0 = "
                        "still right, NaN = not counted: the paper's exact-match matrix; logistic-MF ranks and the "
                        "prediction of Y run on it)"),
    "meta": {"type": ["string", "null"], "default": None, "description": "its .meta JSON (default: MATRIX.meta)"},
    "base_logprobs": {"type": ["string", "null"], "default": None, "description": "base mean log-probs .npy"},
    "sources": {"type": ["string", "null"], "default": None, "description": "one source label per line"},
    "example_ids": {"type": ["string", "null"], "default": None,
                    "description": "one example id per line (a map `forgetmap release` wrote: the corpus's own ids); "
                                   "null: MODEL-000000, MODEL-000001, ..."},
    "splits": {"type": "object", "additionalProperties": {"type": "string"}, "default": {},
               "description": "prediction splits: name -> released split pickle"},
}, required=("matrix",), description="a matrix the paper's authors released, imported instead of computed")

LOGS = obj({
    "format": choice("lm_eval", ("lm_eval", "lighteval"),
                     "lm_eval: lm-evaluation-harness --log_samples files (samples_<task>_<date>.jsonl); lighteval: "
                     "LightEval details (details_<task>_<date>.parquet)"),
    "files": {"type": "array", "items": {"type": "string"}, "minItems": 1,
              "description": "one glob per sampling seed, each matching that seed's files (every task's)"},
    "metric": {"type": ["string", "null"], "default": None,
               "description": "the per-sample metric field read as correctness, rounded to 0/1 (null: acc for "
                              "lm_eval, extractive_match for lighteval)"},
    "align": choice("prompt", ("prompt", "id"),
                    "how logged items find their upstream item: prompt (the logged context is the item's prompt, or "
                    "ends with it) or id (`id` formats the upstream example_id)"),
    "id": {"type": ["string", "null"], "default": None,
           "description": "align id: a template over the log's fields giving the example_id, e.g. '{doc[id]}' or "
                          "'mmlu-{doc_id}'"},
}, required=("files",), description="evaluation logs of the checkpoint, imported as its correctness (no model runs; "
                                    "the row has no Z)")

CHECKPOINT = obj({
    "path": {"type": ["string", "null"], "default": None,
             "description": "a local model directory or a Hugging Face id (in the local cache: forgetmap never "
                            "downloads); or give `logs` instead"},
    "logs": {"oneOf": [{"type": "null"}, LOGS], "default": None,
             "description": "evaluation logs the user already holds, instead of `path`: the row's correctness "
                            "is imported, nothing is scored"},
    "revision": {"type": ["string", "null"], "default": None, "description": "HF revision"},
    "category": {"type": "string", "description": "its post-training type (sft, preference, rl, distill, merge, "
                                                  "...): a key of `categories`; the row's category in every table"},
    "reference": {"type": "string", "default": "base",
                  "description": "what it is compared with: `base` (the model's base) or another checkpoint of the "
                                 "model, for a chain base -> SFT -> DPO -> RL where each stage is compared with the one "
                                 "before"},
    "chat_template": choice("tokenizer", ("auto", "olmo", "tokenizer"),
                            "the chat template it is asked items through, zero-shot, whatever the item's kind (the "
                            "question as the user turn: a post-trained model as Harmon et al. prompt it), and its chat "
                            "examples are scored in: tokenizer (its own), auto or olmo (as models.NAME.chat_template)"),
    "shots": integer(0, "> 0: a base-like row (a domain-continual Coder or Math model), asked every item as plain text "
                        "few-shot, this many solved items of the same source before each (as Harmon et al. prompt a "
                        "base); needs chat_template auto or olmo (for its chat examples' NLL); 0: asked through its "
                        "template", 0),
    "forecast": {"enum": [False, True, "check"], "default": False,
                 "description": "true: forecast its Z row from `forecast.k` scored probes (one probe-scoring job) "
                                "instead of scoring every shard; check: both, the forecast scored against the "
                                "measurement (its reference must be the base, its Z per token)"},
}, required=("category",), description="a checkpoint forgetmap did not train (a public post-trained model): a "
                                               "row of the model's matrices, scored as every run is, with no fine-tune")

MODEL = obj({
    "upstream": {"type": ["string", "null"], "default": None,
                 "description": "the upstream corpus this model is scored on (not for imported models)"},
    "imported": {"oneOf": [{"type": "null"}, IMPORTED], "default": None,
                 "description": "import the authors' released statistics instead of running the pipeline"},
    "tasks": {"oneOf": [{"const": "all"}, {"type": "array", "items": {"type": "string"}}],
              "default": "all", "description": "tasks to fine-tune on: `all` or a list of task names (may be empty for a "
                                      "model whose rows are all checkpoints)"},
    "forecast": {"type": "array", "items": {"type": "string"}, "default": [],
                 "description": "of the model's tasks, those forecast from k scored probes (as `tasks.NAME.forecast: "
                                "true`, for this model only)"},
    "checkpoints": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
                    "additionalProperties": CHECKPOINT,
                    "description": "checkpoints by name, rows beside the fine-tuned tasks (or instead of them: a map "
                                   "of public post-trained models against their base needs no task)"},
    "shots": integer(0, "> 0: the base and its fine-tunes are asked every item as plain text few-shot, this many "
                        "solved items of the same source before each (Harmon et al.'s base); 0 (the paper's path): "
                        "zero-shot, each item in the format it is scored in (lm as plain text, chat through the model's "
                        "chat template)", 0),
    "z": choice("nats_per_token", ("nats_per_token", "bits_per_byte"),
                "the statistic of Z: nats_per_token (the paper: mean NLL per scored token) or bits_per_byte (the scored "
                "text's NLL in bits per UTF-8 byte: comparable across tokenizers, so a row whose tokenizer differs "
                "from its reference's needs it)"),
    "chat_template": choice("auto", ("auto", "olmo", "tokenizer"),
                            "how prompt/response pairs are rendered: auto: the tokenizer's own chat template where it "
                            "has one, else olmo; olmo: the OLMo-Instruct format the paper applies to every model; "
                            "tokenizer: the tokenizer's own (an error where it has none)"),
    "base": BASE,
    "finetune": FINETUNE,
    "correlations": CORRELATIONS,
    "score": SCORE,
    "resources": obj({
        "base": resources(0, 4000, None, 1, "base-model"),
        "finetune": resources(1, None, None, 4, "fine-tuning"),
        "score": resources(1, 16000, None, 4, "scoring"),
        "semantic": resources(1, 16000, None, 4, "semantic-similarity (MiniLM embedding)"),
        "gradient": resources(1, 32000, None, 4, "gradient-similarity (per-example gradients)"),
        "analysis": resources(0, 8000, 60, 1, "matrix-analysis (low rank, cross-task, prediction)"),
    }, description="per-rule resources", default={}),
}, description="a model: its base, how it is fine-tuned and scored (or an imported matrix)")
