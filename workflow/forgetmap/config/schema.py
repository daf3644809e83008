"""The config's schema: one definition gives the JSON schema, its defaults and the settings' types.

`SCHEMA` is the single source: `config/schema.yaml` is generated from it (`forgetmap schema`), the
config is validated against it, and `with_defaults(SECTION, settings)` fills a job's settings from the
same defaults, so no default is repeated in the code that reads them.
"""

from __future__ import annotations

import copy
from typing import Any

from ..predict.registry import DEFAULT_METHODS, METHODS

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def _obj(properties: dict, required: tuple = (), description: str = "", **extra) -> dict:
    schema = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def _num(default, description: str, minimum=None, exclusive_minimum=None, kind="number") -> dict:
    schema = {"type": kind, "default": default, "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if exclusive_minimum is not None:
        schema["exclusiveMinimum"] = exclusive_minimum
    return schema


def _int(default, description: str, minimum=None) -> dict:
    return _num(default, description, minimum=minimum, kind="integer")


def _enum(default, values, description: str) -> dict:
    return {"enum": list(values), "default": default, "description": description}


def _resources(gpu: int, mem_mb: int, runtime: int, threads: int, what: str) -> dict:
    return _obj({
        "gpu": _int(gpu, f"GPUs per {what} job (Snakemake resource `gpu`; SLURM --gpus)", 0),
        "mem_mb": _int(mem_mb, f"memory per {what} job in MB", 1),
        "runtime": _int(runtime, f"wall-clock minutes per {what} job", 1),
        "threads": _int(threads, f"CPU threads per {what} job; torch uses exactly this many", 1),
    }, description=f"resources of each {what} job", default={})


FINETUNE = _obj({
    "method": _enum("full", ("full", "lora"), "full fine-tuning or a LoRA adapter (peft)"),
    "steps": _int(1000, "optimizer steps (paper: 1,000)", 1),
    "batch_size": _int(8, "examples per micro-batch", 1),
    "grad_accum": _int(1, "micro-batches per optimizer step; effective batch = batch_size x grad_accum", 1),
    "lr": _num(2e-6, "peak learning rate (paper: 2e-6)", exclusive_minimum=0),
    "warmup_steps": _int(10, "linear warm-up steps, then linear decay to 0", 0),
    "weight_decay": _num(0.0, "AdamW weight decay", minimum=0),
    "max_grad_norm": _num(1.0, "gradient clipping norm", exclusive_minimum=0),
    "max_epochs": {"type": ["integer", "null"], "minimum": 1, "default": 3,
                   "description": "cap on passes over the training split (null: no cap)"},
    "max_length": _int(1024, "tokens per training example (left-truncated)", 2),
    "seed": _int(42, "seed of the example order and LoRA init; override per task to vary it", 0),
    "gradient_checkpointing": {"type": "boolean", "default": False, "description": "trade compute for memory"},
    "bf16": {"type": "boolean", "default": True, "description": "bf16 autocast on CUDA (ignored on CPU)"},
    "device": {"type": "string", "default": "auto", "description": "auto, cpu, cuda or cuda:N"},
    "processes": _int(1, "training processes, one per GPU: above 1, torchrun runs them with FSDP (full "
                         "fine-tuning; effective batch = batch_size x grad_accum x processes); on GPUs set "
                         "resources.finetune.gpu to the same number", 1),
    "attention": _enum("auto", ("auto", "sdpa", "eager", "flash_attention_2"),
                       "auto: flash_attention_2 on CUDA when flash-attn is installed, else sdpa"),
    "lora": _obj({
        "r": _int(64, "LoRA rank", 1),
        "alpha": _num(16, "LoRA alpha", exclusive_minimum=0),
        "dropout": _num(0.1, "LoRA dropout", minimum=0),
        "target_modules": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                           "default": ["q_proj", "v_proj"], "description": "modules that get adapters"},
    }, description="LoRA settings (method: lora)", default={}),
}, description="fine-tuning settings; a task may override any of them", default={})

SCORE = _obj({
    "backend": _enum("torch", ("torch", "vllm"), "torch (CPU and GPU) or vllm (optional GPU extra)"),
    "token_budget": _int(16384, "padded tokens per scoring batch (torch backend)", 16),
    "max_padding": {"type": ["number", "null"], "minimum": 0, "maximum": 1, "default": None,
                    "description": "largest share of padding in a scoring batch; null: 0 on CPU (equal-length "
                                   "batches), 0.1 on GPU"},
    "max_length": _int(2048, "tokens per scored example (lm: head kept; chat: tail kept)", 2),
    "device": {"type": "string", "default": "auto", "description": "auto, cpu, cuda or cuda:N"},
    "dtype": _enum("auto", ("auto", "float32", "bfloat16", "float16"), "auto: bf16 on GPU, fp32 on CPU"),
    "attention": _enum("auto", ("auto", "sdpa", "eager", "flash_attention_2"), "as for fine-tuning"),
    "gpu_memory_utilization": _num(0.85, "vllm backend: share of GPU memory it may take", exclusive_minimum=0),
    "correctness": _obj({
        "metric": _enum("acc", ("acc", "acc_norm"), "multiple choice: acc = argmax of the options' summed "
                                                    "log-likelihoods; acc_norm = argmax per character (lm-eval)"),
        "target_delimiter": {"type": "string", "default": " ",
                             "description": "lm items: text between the prompt and each option (lm-eval: a space)"},
        "answers": _enum("options", ("options", "sampled"),
                         "options: multiple choice by option log-likelihood, free form by greedy decoding "
                         "(deterministic); sampled: every item answered by text sampled over `seeds` (temperature, "
                         "top_p), the answer extracted as upstream.NAME.answers says (Harmon et al.)"),
        "seeds": _int(3, "sampled: sampling seeds per item (Harmon et al.: 3), paired seed by seed across runs", 1),
        "seed": _int(0, "sampled: the first seed (seeds seed, seed+1, ...)", 0),
        "temperature": _num(0.6, "sampled: sampling temperature (Harmon et al.: 0.6)", minimum=0),
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.95,
                  "description": "sampled: nucleus sampling mass (Harmon et al.: 0.95)"},
        "max_new_tokens": _int(32, "generation length cap: free-form greedy answers, or sampled answers (Harmon et "
                                   "al. allow 32,768 for chain of thought); an answer never runs past the model's "
                                   "positions: it may take min(max_new_tokens, positions - its question's tokens), and "
                                   "a question is never cut", 1),
        "stop": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": ["\n\n"],
                 "description": "generated answers (greedy and sampled) end at the first of these, and every "
                                "extractor reads the text before it (paper: a blank line; [] for chains of thought)"},
    }, description="items with an `answer`: how their correctness is scored", default={}),
}, description="scoring settings", default={})

DEMO_BASE = {
    "n_examples": _int(2400, "demo: pretraining examples (the first n of the demo generator)", 1),
    "vocab_size": _int(512, "demo: BPE vocabulary size", 64),
    "max_length": _int(64, "demo: tokens per pretraining example", 8),
    "architecture": _obj({
        "hidden_size": _int(128, "hidden size", 8),
        "intermediate_size": _int(384, "MLP size", 8),
        "layers": _int(4, "transformer layers", 1),
        "heads": _int(4, "attention heads", 1),
        "max_position_embeddings": _int(256, "context length", 8),
    }, description="demo: Llama-style architecture", default={}),
    "steps": _int(1200, "demo: pretraining steps", 1),
    "batch_size": _int(32, "demo: pretraining batch size", 1),
    "lr": _num(3e-3, "demo: pretraining peak learning rate", exclusive_minimum=0),
    "warmup_steps": _int(50, "demo: warm-up steps", 0),
    "weight_decay": _num(0.01, "demo: AdamW weight decay", minimum=0),
    "max_grad_norm": _num(1.0, "demo: clipping norm", exclusive_minimum=0),
    "eval_every": _int(100, "demo: steps between upstream-NLL evaluations in the log (0: never)", 0),
    "seed": _int(0, "demo: seed of the initial weights and example order", 0),
    "device": {"type": "string", "default": "cpu", "description": "demo: device to pretrain on"},
}

BASE = _obj({
    "kind": _enum("demo", ("demo", "pretrained"),
                  "demo: pretrain a tiny model on the demo corpus; pretrained: use `path`"),
    "path": {"type": ["string", "null"], "default": None,
             "description": "pretrained: a local model directory or a Hugging Face id"},
    "revision": {"type": ["string", "null"], "default": None, "description": "pretrained: HF revision"},
    **DEMO_BASE,
}, description="the base model", default={})

CORRELATIONS = _obj({
    "semantic": {"type": "boolean", "default": True, "description": "correlate Z with MiniLM embedding cosine"},
    "gradient": {"type": "boolean", "default": True, "description": "correlate Z with projected gradient products"},
    "dim": _int(1024, "gradient projection dimension (count sketch)", 8),
    "max_task_examples": _int(1000, "training examples per task embedded / differentiated (reference: 1,000)", 1),
    "max_length": _int(1024, "tokens per example for gradients", 2),
    "batch_size": _int(64, "texts per embedding batch", 1),
    "seed": _int(0, "seed of the gradient projection", 0),
    "device": {"type": "string", "default": "auto", "description": "auto, cpu or cuda"},
}, description="the semantic and gradient correlation analyses", default={})

IMPORTED = _obj({
    "matrix": {"type": "string", "description": "released Z as .npy (tasks x examples)"},
    "statistic": _enum("nll_change", ("nll_change", "forgotten_1to0"),
                       "what the .npy holds: nll_change, the forgetting Z (the analyses and prediction of Z run on "
                       "it); forgotten_1to0, the binary Y (1 = an item the base answered right is answered wrong, 0 = "
                       "still right, NaN = not counted: the paper's exact-match matrix; logistic-MF ranks and the "
                       "prediction of Y run on it)"),
    "meta": {"type": ["string", "null"], "default": None, "description": "its .meta JSON (default: MATRIX.meta)"},
    "base_logprobs": {"type": ["string", "null"], "default": None, "description": "base mean log-probs .npy"},
    "sources": {"type": ["string", "null"], "default": None, "description": "one source label per line"},
    "splits": {"type": "object", "additionalProperties": {"type": "string"}, "default": {},
               "description": "prediction splits: name -> released split pickle"},
}, required=("matrix",), description="a matrix the paper's authors released, imported instead of computed")

LOGS = _obj({
    "format": _enum("lm_eval", ("lm_eval", "lighteval"),
                    "lm_eval: lm-evaluation-harness --log_samples files (samples_<task>_<date>.jsonl); lighteval: "
                    "LightEval details (details_<task>_<date>.parquet)"),
    "files": {"type": "array", "items": {"type": "string"}, "minItems": 1,
              "description": "one glob per sampling seed, each matching that seed's files (every task's)"},
    "metric": {"type": ["string", "null"], "default": None,
               "description": "the per-sample metric field read as correctness, rounded to 0/1 (null: acc for "
                              "lm_eval, extractive_match for lighteval)"},
    "align": _enum("prompt", ("prompt", "id"),
                   "how logged items find their upstream item: prompt (the logged context is the item's prompt, or "
                   "ends with it) or id (`id` formats the upstream example_id)"),
    "id": {"type": ["string", "null"], "default": None,
           "description": "align id: a template over the log's fields giving the example_id, e.g. '{doc[id]}' or "
                          "'mmlu-{doc_id}'"},
}, required=("files",), description="evaluation logs of the checkpoint, imported as its correctness (no model runs; "
                                     "the row has no Z)")

CHECKPOINT = _obj({
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
    "chat_template": _enum("tokenizer", ("auto", "olmo", "tokenizer"),
                           "the chat template it is asked items through, zero-shot, whatever the item's kind (the "
                           "question as the user turn: a post-trained model as Harmon et al. prompt it), and its chat "
                           "examples are scored in: tokenizer (its own), auto or olmo (as models.NAME.chat_template)"),
    "shots": _int(0, "> 0: a base-like row (a domain-continual Coder or Math model), asked every item as plain text "
                     "few-shot, this many solved items of the same source before each (as Harmon et al. prompt a "
                     "base); needs chat_template auto or olmo (for its chat examples' NLL); 0: asked through its "
                     "template", 0),
    "forecast": {"enum": [False, True, "check"], "default": False,
                 "description": "true: forecast its Z row from `forecast.k` scored probes (one probe-scoring job) "
                                "instead of scoring every shard; check: both, the forecast scored against the "
                                "measurement (its reference must be the base, its Z per token)"},
}, required=("category",), description="a checkpoint forgetmap did not train (a public post-trained model): a "
                                                "row of the model's matrices, scored as every run is, with no fine-tune")

MODEL = _obj({
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
    "shots": _int(0, "> 0: the base and its fine-tunes are asked every item as plain text few-shot, this many "
                     "solved items of the same source before each (Harmon et al.'s base); 0 (the paper's path): "
                     "zero-shot, each item in the format it is scored in (lm as plain text, chat through the model's "
                     "chat template)", 0),
    "z": _enum("nats_per_token", ("nats_per_token", "bits_per_byte"),
               "the statistic of Z: nats_per_token (the paper: mean NLL per scored token) or bits_per_byte (the scored "
               "text's NLL in bits per UTF-8 byte: comparable across tokenizers, so a row whose tokenizer differs "
               "from its reference's needs it)"),
    "chat_template": _enum("auto", ("auto", "olmo", "tokenizer"),
                           "how prompt/response pairs are rendered: auto: the tokenizer's own chat template where it "
                           "has one, else olmo; olmo: the OLMo-Instruct format the paper applies to every model; "
                           "tokenizer: the tokenizer's own (an error where it has none)"),
    "base": BASE,
    "finetune": FINETUNE,
    "correlations": CORRELATIONS,
    "score": SCORE,
    "resources": _obj({
        "base": _resources(0, 4000, 60, 1, "base-model"),
        "finetune": _resources(1, 32000, 240, 4, "fine-tuning"),
        "score": _resources(1, 16000, 60, 4, "scoring"),
        "semantic": _resources(1, 16000, 60, 4, "semantic-similarity (MiniLM embedding)"),
        "gradient": _resources(1, 32000, 240, 4, "gradient-similarity (per-example gradients)"),
        "analysis": _resources(0, 8000, 60, 1, "matrix-analysis (low rank, cross-task, prediction)"),
    }, description="per-rule resources", default={}),
}, description="a model: its base, how it is fine-tuned and scored (or an imported matrix)")

def _hf(what: str, contract: tuple[str, ...]) -> dict:
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
        "turns": _enum("first", ("first", "all"), "format hf with messages: first: the first user turn and the "
                                                  "assistant's reply (the paper's Tulu tasks); all: the last assistant "
                                                  "turn as the response, every turn before it as the prompt"),
        "context_template": {"type": "string", "default": "Context: {context}\n\n{prompt}",
                             "description": "format hf: how a non-empty `context` column is folded into the prompt "
                                            "(Dolly)"},
        "columns": _obj({c: {"type": "string"} for c in contract}, default={},
                        description="contract column -> the file's or dataset's column (format hf: or a template over "
                                    "its columns, e.g. '{question}\nAnswer:'), where the names differ"),
    }


PART = _obj({
    **{k: v for k, v in _hf("part", ("example_id", "source", "kind", "text", "prompt", "response", "choices",
                                    "answer")).items() if k not in ("context_template",)},
    "kind": {"enum": ["lm", "chat"], "description": "every row's kind, where the part has no `kind` column"},
    "source": {"type": ["string", "null"], "description": "every row's source label, where the part has no "
                                                          "`source` column (default: the dataset and configuration)"},
}, required=("dataset",), description="one dataset of a corpus of several (format hf with `parts`)")

CORPUS = _obj({
    "format": _enum("parquet", ("demo", "parquet", "jsonl", "hf"),
                    "demo: generated; parquet/jsonl: a file at `path`; hf: a Hugging Face dataset (`dataset`)"),
    "path": {"type": ["string", "null"], "default": None, "description": "the corpus file (upstream contract)"},
    "n_examples": _int(2400, "demo: examples generated", 1),
    "kind": _enum("lm", ("lm", "chat"), "format hf without a `kind` column: every row's kind (chat: prompt and "
                                        "response, or messages)"),
    "source": {"type": ["string", "null"], "default": None,
               "description": "format hf without a `source` column: every row's source label (default: the dataset)"},
    "benchmark_categories": {"type": "object", "default": {},
                             "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                             "description": "benchmark categories of the sources (sub-benchmarks), as Harmon et al. "
                                            "group them: category -> source names or globs (e.g. {math: ['gsm8k', "
                                            "'mmlu_*math*']}); correctness rates are averaged over a category's "
                                            "sources, then over categories; a source no category lists is one"},
    "answers": _obj({
        "extract": _enum("auto", ("auto", "letter", "choice", "number", "regex", "exact"),
                         "how a sampled answer is read from the generated text: letter (multiple choice, options "
                         "lettered A, B, ... after the prompt), choice (multiple choice whose prompt lists the options: "
                         "the option named by its text), number (GSM8K-style), regex (`pattern`), exact (the text, "
                         "SQuAD-normalised); auto: letter for multiple choice, number where the answer is a number, "
                         "else exact"),
        "pattern": {"type": ["string", "null"], "default": None,
                    "description": "extract regex: the pattern; its first group (or the match) is the answer"},
        "sources": {"type": "object", "default": {},
                    "additionalProperties": _obj({
                        "extract": {"enum": ["auto", "letter", "choice", "number", "regex", "exact"]},
                        "pattern": {"type": ["string", "null"]}}),
                    "description": "per source label: its own extract / pattern"},
    }, description="items answered by sampled text (score.correctness.answers: sampled): how the answer is "
                   "extracted, for the corpus and per source", default={}),
    **_hf("upstream corpus", ("example_id", "source", "kind", "text", "prompt", "response", "choices", "answer")),
    "parts": {"type": "array", "items": PART, "default": [],
              "description": "format hf: several datasets, one after the other, as one corpus (e.g. MMLU, ARC, "
                             "GSM8K); a key given at the corpus level is shared by every part, a part's own wins"},
}, description="an upstream corpus")

TASK = _obj({
    "category": {"type": "string", "description": "a key of `categories`"},
    "format": _enum("file", ("file", "hf"), "file: `path` (or the demo generator); hf: a Hugging Face dataset"),
    "path": {"type": ["string", "null"], "default": None,
             "description": "task file (parquet/jsonl/json); null: the demo generator of this name. With `{task}` "
                            "in it, a glob: every matching file is a task named by what `{task}` matched"},
    "validation_path": {"type": ["string", "null"], "default": None,
                        "description": "separate validation file (may use `{task}` as `path` does)"},
    "validation_split": {"type": ["string", "null"], "default": None,
                         "description": "format hf: the dataset split read as validation"},
    "validation_fraction": _num(0.1, "share held out as validation when the file has no split", minimum=0),
    "each": {"type": ["string", "null"], "default": None,
             "description": "format hf: one task per distinct value of this column (named by the value), e.g. "
                            "Dolly's category"},
    "n_examples": _int(200, "demo: examples generated", 2),
    "finetune": {**copy.deepcopy(FINETUNE), "description": "overrides of the model's fine-tuning settings"},
    "forecast": {"enum": [False, True, "check"], "default": False,
                 "description": "true: forecast this task's forgetting from k scored probes (one fine-tune, one "
                                "k-example scoring job) instead of scoring it on every upstream shard; check: both, "
                                "the forecast scored against the measurement"},
    **_hf("task", ("prompt", "response", "context")),
}, required=("category",), description="a fine-tuning task (or, with `{task}` in `path` or `each`, a family of them)")

for _p in TASK["properties"]["finetune"]["properties"].values():
    _p.pop("default", None)


SPLIT = _obj({
    "test": {"type": ["array", "null"], "items": {"type": "string"}, "default": None,
             "description": "in-domain split: its test tasks; the other tasks of their categories train"},
    "test_category": {"type": ["string", "null"], "default": None,
                      "description": "out-of-domain split: a whole category as test"},
    "train_split": {"type": ["string", "null"], "default": None,
                    "description": "out-of-domain split: the in-domain split whose train tasks train it"},
}, description="a prediction split")

PREDICTION = _obj({
    "k": _int(30, "known (measured) examples of each test task", 1),
    "seeds": _int(10, "seeds 0..n-1 of the known-example draw", 1),
    "methods": {"oneOf": [
        {"type": "array", "items": {"enum": list(METHODS)}, "minItems": 1, "uniqueItems": True},
        {"type": "object", "minProperties": 1, "propertyNames": {"enum": list(METHODS)},
         "additionalProperties": {"type": ["object", "null"]}}],
        "default": list(DEFAULT_METHODS),
        "description": "completion methods to evaluate: a list of names, or {name: {parameter: value}} to set "
                       "their hyperparameters (those of each method's class in forgetmap.predict); surprise_* "
                       "need the `reference` extra"},
    "probes": _enum("random", ("random", "dopt", "medoids"),
                    "how the k known examples of a test task are chosen, from the train tasks alone: random (the "
                    "paper); dopt (greedy D-optimal design on the fold-in's column factors); medoids (the column "
                    "nearest each k-means centre of the factors)"),
    "intervals": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                  "uniqueItems": True, "default": [0.8, 0.9],
                  "description": "levels of the split-conformal intervals around each predicted entry (leave-one-"
                                 "task-out folds of the train tasks; regression methods); their coverage and width "
                                 "join the prediction metrics; [] for none"},
    "probe_evaluation": _obj({
        "method": {"type": "string", "default": "mf", "description": "the completion method the strategies feed"},
        "ks": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "uniqueItems": True,
               "default": [5, 10, 20, 30, 50], "description": "numbers of measured examples compared"},
        "draws": _int(10, "random draws (and k-means starts) per k", 1),
        "strategies": {"type": "array", "items": {"enum": ["random", "dopt", "medoids"]}, "minItems": 1,
                       "uniqueItems": True, "default": ["random", "dopt", "medoids"],
                       "description": "probe strategies compared (random is the baseline)"},
        "reference_k": {"type": ["integer", "null"], "minimum": 1, "default": None,
                        "description": "the k of random probes the others must match (null: prediction.k)"},
    }, description="probe strategies side by side per split: RMSE, top-q F1, precision at the budget and "
                   "interval coverage by k, against random probes (forgetmap.predict.probe_evaluation)", default={}),
    "threshold": _num(0.0, "forgotten := Z > threshold for the binary metrics"),
    "top_q": _num(0.1, "top-q metric: share of each task's examples counted as most forgotten",
                  exclusive_minimum=0),
    "budget": _int(100, "precision among each task's b highest predictions (a replay budget)", 1),
    "splits": {"type": "object", "propertyNames": {"pattern": NAME}, "additionalProperties": SPLIT,
               "default": {}, "description": "prediction splits by name"},
}, description="forgetting prediction (paper §5)", default={})

def _knob(description: str, kind: str = "number", minimum=None, maximum_exclusive=None, minimum_exclusive=None) -> dict:
    """An arena knob: a value, or a list of values the arm's job sweeps (null: not set)."""
    bounds = {k: v for k, v in (("minimum", minimum), ("exclusiveMaximum", maximum_exclusive),
                                ("exclusiveMinimum", minimum_exclusive)) if v is not None}
    return {"type": [kind, "array", "null"], **bounds, "items": {"type": kind, **bounds}, "minItems": 1,
            "uniqueItems": True, "default": None, "description": description + " (a list: swept)"}


ARM = _obj({
    "replay": _enum("none", ("none", "random", "predicted", "ground_truth", "high_base_nll", "online",
                             "self_generated"),
                    "which upstream examples to replay: none; random (uniform); predicted (softmax of a completion "
                    "method's predicted row / temperature); ground_truth (the task's true row: the oracle); "
                    "high_base_nll (the examples the base model finds hardest); online (the paper's partition runs: "
                    "random replay for the first `warmup` share of steps, then the forgetting of `probes` examples "
                    "measured in the job, the row completed by `method`, and predicted replay for the rest); "
                    "self_generated (text the base model generates itself, from the prompts of randomly drawn upstream "
                    "examples or from nothing: `generation`)"),
    "method": {"type": ["string", "null"], "default": None,
               "description": "predicted replay: the completion method (a configured prediction method)"},
    "split": {"type": ["string", "null"], "default": None,
              "description": "predicted replay: the prediction split whose test task the task is (null: the first "
                             "split that has the task as a test task)"},
    "prediction_seed": _int(0, "predicted replay: which seed's known columns the prediction used (paper: 0)", 0),
    "statistic": _enum("loss", ("loss", "forgotten_1to0"),
                       "predicted and ground_truth replay: the scores' statistic; loss: the (predicted) forgetting Z "
                       "(the paper); forgotten_1to0: P(Y = 1), the (predicted) chance that a base-correct item is "
                       "answered wrong after the fine-tune (`method` then names a correctness.methods predictor); only "
                       "base-correct items with an answer are candidates"),
    "risk": {"type": "number", "default": 0.0,
             "description": "predicted replay: weight beta of the prediction's uncertainty; the scores become "
                            "mu + beta * h, h the conformal half-width at `risk_level` (risk-aware replay; 0: mu alone)"},
    "risk_level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.9,
                   "description": "predicted replay with risk: the interval level (one of prediction.intervals)"},
    "probes": _int(30, "online replay: upstream examples whose forgetting is measured during training (paper: 30)", 1),
    "probe_selection": _enum("random", ("random", "dopt", "medoids"),
                             "online replay: how its probes are chosen from the pool (forgetmap.predict.probes; "
                             "dopt and medoids use the split's train rows)"),
    "warmup": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.1,
               "description": "online replay: share of the steps trained with random replay before the probes "
                              "are measured (paper: 0.1)"},
    "ratio": _num(0.03125, "replayed examples per task example (paper: 1/32); the steps grow by (1 + ratio)",
                  exclusive_minimum=0),
    "temperature": _num(0.1, "softmax temperature of the replay weights (paper: 0.1)", exclusive_minimum=0),
    "selection": _enum("sample", ("sample", "max"), "sample: draw with the softmax weights, without replacement "
                                                    "(the paper's runs); max: the top scores"),
    "tokens": _enum("none", ("none", "stm", "stm_random"),
                    "stm: mask response tokens the base model finds high-perplexity; stm_random: as many masked "
                    "tokens at random positions (the control)"),
    "stm_mode": _enum("quantile", ("quantile", "abs"), "quantile: mask the top q of the task's response tokens by "
                                                       "base NLL; abs: mask tokens with base perplexity above tau"),
    "tau": _num(2.5, "STM abs mode: perplexity threshold (Wu et al.: 2.5)", exclusive_minimum=0),
    "q": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.2,
          "description": "STM quantile mode: share of response tokens masked"},
    "weights": _enum("none", ("none", "flow"), "flow: weight each task example by exp(-base loss / tau), tau the "
                                              "median base loss (Sanyal et al., ICML 2025)"),
    "targets": _enum("original", ("original", "sdft"),
                     "sdft: the base model rewrites each training response, shown the prompt and the reference, and "
                     "the rewrite replaces it where it still carries the answer (Yang et al., ACL 2024)"),
    "generation": _obj({
        "prompts": _enum("upstream", ("upstream", "none"),
                         "self-generated replay: continue the drawn upstream examples' prompts (chat) or first "
                         "`prefix_tokens` tokens (lm), or generate from nothing"),
        "prefix_tokens": _int(8, "self-generated replay from upstream lm examples: tokens of each kept as its prompt", 0),
        "temperature": {"type": ["number", "null"], "minimum": 0, "default": None,
                        "description": "sampling temperature (null: 1 for self-generated replay, 0 (greedy) for SDFT)"},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0,
                  "description": "nucleus sampling mass"},
        "max_new_tokens": _int(64, "tokens generated at most per text (stopped at EOS)", 1),
    }, description="self-generated replay and SDFT: how the base model writes", default={}),
    "lora": {"type": ["object", "null"], "default": None, "additionalProperties": False,
             "properties": {"r": _knob("LoRA rank", "integer", minimum=1),
                            "alpha": {"type": "number", "exclusiveMinimum": 0, "description": "LoRA alpha"},
                            "dropout": {"type": "number", "minimum": 0, "description": "LoRA dropout"},
                            "target_modules": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                               "description": "modules that get adapters"}},
             "description": "LoRA as a mitigation: the arm fine-tunes adapters (keys not given: the model's "
                            "finetune.lora); a list of ranks is swept"},
    "lr": _knob("the peak learning rate of the arm's fine-tunes (null: the model's; LoRA usually wants a larger "
                "one; a list sweeps it, as early stopping and a smaller step size would)", minimum_exclusive=0),
    "l2_sp": _knob("L2-SP: the loss gains lambda/2 * ||theta - theta_0||^2 over the trained parameters (Li et al., "
                   "2018)", minimum=0),
    "kl_base": _knob("KL anchor: the loss gains beta * KL(p_base || p_theta) on the task's target tokens (the base: "
                     "a frozen copy, or under LoRA the adapter switched off)", minimum=0),
    "train_top": _knob("layer freezing: only the top n transformer blocks train", "integer", minimum=1),
    "train_modules": {"type": ["array", "null"], "items": {"type": "string", "minLength": 1}, "minItems": 1,
                      "default": None, "description": "layer freezing: only these modules train (matched as LoRA's "
                                                      "target_modules: mlp, self_attn, lm_head, layers.3)"},
    "ema": _knob("EMA of the weights with this decay, the result the slow weights (SuRe); a modifier of any arm",
                 maximum_exclusive=1, minimum=0),
}, description="a mitigation arm: replay, token masks, example weights, LoRA, anchors, freezing and EMA combine; "
               "at most one knob (lr, lora.r, l2_sp, kl_base, train_top, ema) is a list, swept inside the arm's job")

FORECAST = _obj({
    "k": _int(30, "probe examples scored for each forecast task (the paper's k)", 1),
    "probes": _enum("dopt", ("random", "dopt", "medoids"),
                    "how the probes are chosen from the measured tasks' rows: dopt (greedy D-optimal design, each "
                    "column weighted by its noise; it beat random probes on the demo and at paper scale), random "
                    "(the paper), medoids"),
    "method": {"type": "string", "default": "mf",
               "description": "the completion method: a regression method of prediction.methods without side "
                              "information (mean, additive, knn, mf)"},
    "seed": _int(0, "seed of random and medoids probes", 0),
}, description="forecasting a task's forgetting from k scored probes, by a method fitted on the measured tasks",
    default={})

EXPLORER = _obj({
    "examples_per_task": _int(50, "a task's most forgotten examples carried in full (and 20 most improved)", 1),
    "columns": _int(240, "bins of examples in the overview (per source, ordered by the leading component)", 1),
    "method": {"type": "string", "default": "mf",
               "description": "the prediction shown beside each split's test tasks (a configured method; seed 0)"},
}, description="the explorer: one offline HTML page per model linking its matrix to its examples",
    default={})

MITIGATION = _obj({
    "arms": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME, "not": {"const": "none"}},
             "additionalProperties": ARM,
             "description": "mitigation arms by name; `none` (plain fine-tuning) is always there to compare with"},
    "tasks": {"oneOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1},
                        {"type": "object", "properties": {"split": {"type": "string"}}, "required": ["split"],
                         "additionalProperties": False}],
              "default": None, "description": "tasks every arm fine-tunes on: a list, or {split: NAME} for that "
                                              "prediction split's test tasks"},
    "seeds": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "default": [0],
              "uniqueItems": True, "description": "fine-tuning seeds of every arm (example order, replay draw)"},
    "heldout": {"type": "number", "exclusiveMinimum": 0, "default": 10000,
                "description": "upstream examples never replayed and used to judge every arm: a count, or a share "
                               "below 1 (paper: 10,000 of 141,871)"},
    "heldout_seed": _int(0, "seed of the held-out draw", 0),
    "level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.95,
              "description": "level of the bootstrap intervals"},
    "interpolation": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "uniqueItems": True,
                      "default": [], "description": "WiSE-FT: every fine-tune of every arm (plain fine-tuning too) is "
                                                    "also judged at theta = (1 - a) theta_base + a theta_ft for each a "
                                                    "(LoRA: the adapter scaled by a), without training again"},
}, description="forgetting less: arms fine-tuned on the test tasks, judged on held-out upstream examples",
    default={})

CORRECTNESS = _obj({
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

SCHEMA = _obj({
    "seed": _int(0, "seed of task splits and anything not seeded elsewhere", 0),
    "demo_seed": _int(1234, "seed of the demo world: demo corpora, demo tasks, the demo base's corpus", 0),
    "shard_size": _int(10000, "upstream examples per scoring job", 1),
    "keep_checkpoints": {"type": "boolean", "default": True,
                         "description": "false: fine-tuned checkpoints are temp() and deleted after scoring"},
    "upstream": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
                 "additionalProperties": CORPUS, "description": "upstream corpora by name"},
    "categories": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
                   "additionalProperties": _obj({"group": _enum("in_domain", ("in_domain", "out_of_domain"),
                                                                "prediction split group")}),
                   "description": "task categories and their split group"},
    "tasks": {"type": "object", "default": {}, "propertyNames": {"pattern": NAME},
              "additionalProperties": TASK, "description": "fine-tuning tasks by name"},
    "models": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": NAME},
               "additionalProperties": MODEL, "description": "models by name"},
    "prediction": PREDICTION,
    "forecast": FORECAST,
    "explorer": EXPLORER,
    "mitigation": MITIGATION,
    "correctness": CORRECTNESS,
}, required=("models",), description="forgetmap workflow config (upstream corpora and tasks are needed by computed "
                                    "models only: a config of imported models alone needs neither)",
    **{"$schema": "https://json-schema.org/draft/2020-12/schema"})


def with_defaults(schema: dict, value: Any) -> Any:
    """`value` with every default of `schema` filled in, nested objects too (a copy; given keys win)."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        return value
    out = dict(value)
    for key, sub in schema.get("properties", {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = with_defaults(sub, out[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in out:
            if key not in schema.get("properties", {}):
                out[key] = with_defaults(extra, out[key])
    return out


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def explain(error) -> str:
    """A schema violation as a message naming the key, the value and what is allowed."""
    where = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"config key {where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}"
    if error.validator == "required":
        return f"config key {where}: {error.message}"
    if error.validator == "enum":
        return f"config key {where}: value {error.instance!r} is not allowed; allowed: " \
               f"{', '.join(map(str, error.validator_value))}"
    if error.validator == "not" and error.validator_value == {"const": "none"}:
        return f"config key {where}: the name 'none' is reserved for plain fine-tuning, every arm's comparison"
    if error.validator == "propertyNames":
        return f"config key {where}: name {error.instance!r} is not allowed; names match {NAME}"
    return f"config key {where}: value {error.instance!r} is invalid: {error.message}"


def schema_command(out: str | None = None) -> None:
    """`forgetmap schema`: the JSON schema as YAML (config/schema.yaml is this output)."""
    import sys
    from pathlib import Path

    import yaml

    text = "# Generated by `forgetmap schema` from forgetmap/config/schema.py: edit that, not this file.\n"
    text += yaml.safe_dump(SCHEMA, sort_keys=False, width=110)
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)
