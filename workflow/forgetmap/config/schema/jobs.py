"""What a model's jobs do: its fine-tuning, its scoring (and items' correctness), its base, the correlation
analyses."""

from __future__ import annotations

from .fields import choice, integer, number, obj


FINETUNE = obj({
    "method": choice("full", ("full", "lora"), "full fine-tuning or a LoRA adapter (peft)"),
    "steps": integer(1000, "optimizer steps (paper: 1,000)", 1),
    "batch_size": integer(8, "examples per micro-batch", 1),
    "grad_accum": integer(1, "micro-batches per optimizer step; effective batch = batch_size x grad_accum", 1),
    "lr": number(2e-6, "peak learning rate (paper: 2e-6)", exclusive_minimum=0),
    "warmup_steps": integer(10, "linear warm-up steps, then linear decay to 0", 0),
    "weight_decay": number(0.0, "AdamW weight decay", minimum=0),
    "max_grad_norm": number(1.0, "gradient clipping norm", exclusive_minimum=0),
    "max_epochs": {"type": ["integer", "null"], "minimum": 1, "default": 3,
                   "description": "cap on passes over the training split (null: no cap)"},
    "max_length": integer(1024, "tokens per training example (left-truncated)", 2),
    "seed": integer(42, "seed of the example order and LoRA init; override per task to vary it", 0),
    "gradient_checkpointing": {"enum": [True, False, "auto"], "default": "auto",
                               "description": "recompute each layer's activations in the backward pass (about a third "
                                              "more compute, a fraction of the memory); auto: on only where the "
                                              "fine-tune would not fit its GPU without it (forgetmap.memory's "
                                              "estimate against resources.finetune.gpu_memory_gib, else the GPU the "
                                              "job gets), off on a CPU"},
    "bf16": {"type": "boolean", "default": True, "description": "bf16 autocast on CUDA (ignored on CPU)"},
    "packing": {"type": "boolean", "default": False,
                "description": "a micro-batch's examples packed into rows without padding and without attention "
                               "across them (position ids restart per example; the same loss per token); for the "
                               "architectures forgetmap.data.packing has checked, refused for others"},
    "device": {"type": "string", "default": "auto", "description": "auto, cpu, cuda or cuda:N"},
    "processes": integer(1, "training processes, one per GPU: above 1, torchrun runs them with FSDP (full "
                            "fine-tuning; effective batch = batch_size x grad_accum x processes); on GPUs set "
                            "resources.finetune.gpu to the same number", 1),
    "process_group_timeout": integer(60, "processes above 1: minutes a training process waits at a collective "
                                         "before it gives up (torch's default is 10; rank 0 alone reads the model "
                                         "before the first and writes the checkpoint before the last)", 1),
    "attention": choice("auto", ("auto", "sdpa", "eager", "flash_attention_2"),
                        "auto: flash_attention_2 on CUDA when flash-attn is installed, else sdpa"),
    "monitor": obj({
        "every": {"type": ["integer", "null"], "minimum": 1, "default": None,
                  "description": "score the probes every N optimizer steps (null: not by steps)"},
        "at": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
               "uniqueItems": True, "default": [], "description": "and at these shares of the steps"},
    }, description="a forecast task's fine-tune (`forecast: true` or `check`) scores the forecast's k probes on the "
                   "live weights at its start, at each check and at its end, and the forecast job completes each "
                   "check's row: results/{model}/forecast/trajectory.tsv (measured tasks are the rows the "
                   "forecast is fitted on and are never monitored; under FSDP every process scores its share in "
                   "step)", default={}),
    "lora": obj({
        "r": integer(64, "LoRA rank", 1),
        "alpha": number(16, "LoRA alpha", exclusive_minimum=0),
        "dropout": number(0.1, "LoRA dropout", minimum=0),
        "target_modules": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                           "default": ["q_proj", "v_proj"], "description": "modules that get adapters"},
    }, description="LoRA settings (method: lora)", default={}),
}, description="fine-tuning settings; a task may override any of them", default={})

SCORE = obj({
    "backend": choice("torch", ("torch", "vllm"), "torch (CPU and GPU) or vllm (optional GPU extra)"),
    "token_budget": integer(16384, "padded tokens per scoring batch (torch backend)", 16),
    "max_padding": {"type": ["number", "null"], "minimum": 0, "maximum": 1, "default": None,
                    "description": "largest share of padding in a scoring batch; null: 0 on CPU (equal-length "
                                   "batches), 0.1 on GPU"},
    "max_length": integer(2048, "tokens per scored example (lm: head kept; chat: tail kept)", 2),
    "packing": {"type": "boolean", "default": False,
                "description": "torch backend: examples packed into rows without padding and without attention "
                               "across them (position ids restart per example; each example's NLL the same to "
                               "1e-5 in fp32); for the architectures forgetmap.data.packing has checked, refused for "
                               "others"},
    "device": {"type": "string", "default": "auto", "description": "auto, cpu, cuda or cuda:N"},
    "dtype": choice("auto", ("auto", "float32", "bfloat16", "float16"), "auto: bf16 on GPU, fp32 on CPU"),
    "attention": choice("auto", ("auto", "sdpa", "eager", "flash_attention_2"), "as for fine-tuning"),
    "gpu_memory_utilization": {**number(0.85, "vllm backend: share of GPU memory it may take, in (0, 1]",
                                        exclusive_minimum=0), "maximum": 1},
    "correctness": obj({
        "metric": choice("acc", ("acc", "acc_norm"), "multiple choice: acc = argmax of the options' summed "
                                                     "log-likelihoods; acc_norm = argmax per character (lm-eval)"),
        "target_delimiter": {"type": "string", "default": " ",
                             "description": "lm items: text between the prompt and each option (lm-eval: a space)"},
        "answers": choice("options", ("options", "sampled"),
                          "options: multiple choice by option log-likelihood, free form by greedy decoding "
                          "(deterministic); sampled: every item answered by text sampled over `seeds` (temperature, "
                          "top_p), the answer extracted as upstream.NAME.answers says (Harmon et al.)"),
        "seeds": integer(3, "sampled: sampling seeds per item (Harmon et al.: 3), paired seed by seed across runs", 1),
        "seed": integer(0, "sampled: the first seed (seeds seed, seed+1, ...)", 0),
        "temperature": number(0.6, "sampled: sampling temperature (Harmon et al.: 0.6)", minimum=0),
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.95,
                  "description": "sampled: nucleus sampling mass (Harmon et al.: 0.95)"},
        "max_new_tokens": integer(32, "generation length cap: free-form greedy answers, or sampled answers (Harmon et "
                                      "al. allow 32,768 for chain of thought); an answer never runs past the model's "
                                      "positions: it may take min(max_new_tokens, positions - its question's tokens), and "
                                      "a question is never cut", 1),
        "stop": {"type": "array", "items": {"type": "string", "minLength": 1}, "default": ["\n\n"],
                 "description": "generated answers (greedy and sampled) end at the first of these, and every "
                                "extractor reads the text before it (paper: a blank line; [] for chains of thought)"},
    }, description="items with an `answer`: how their correctness is scored", default={}),
    "cells": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1,
              "description": "the share of each fine-tuned row's cells scored (the base always scores every example, "
                             "and every item with an answer is scored under every run): below 1 the map is "
                             "completed from its measured cells (forgetmap.fractional), with a conformal half-width "
                             "per completed cell, and every analysis says which cells it read"},
    "design": choice("balanced", ("balanced", "uniform"),
                     "which cells a fractional map measures: balanced (every example under about the same number of "
                     "tasks: the measured best at 10-50 %, benchmarks/fractional_map.py) or uniform (a hash per cell)"),
    "level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.9,
              "description": "the coverage of a fractional map's half-widths"},
}, description="scoring settings", default={})

DEMO_BASE = {
    "n_examples": integer(2400, "demo: pretraining examples (the first n of the demo generator)", 1),
    "vocab_size": integer(512, "demo: BPE vocabulary size", 64),
    "max_length": integer(64, "demo: tokens per pretraining example", 8),
    "architecture": obj({
        "hidden_size": integer(128, "hidden size", 8),
        "intermediate_size": integer(384, "MLP size", 8),
        "layers": integer(4, "transformer layers", 1),
        "heads": integer(4, "attention heads", 1),
        "max_position_embeddings": integer(256, "context length", 8),
    }, description="demo: Llama-style architecture", default={}),
    "steps": integer(1200, "demo: pretraining steps", 1),
    "batch_size": integer(32, "demo: pretraining batch size", 1),
    "lr": number(3e-3, "demo: pretraining peak learning rate", exclusive_minimum=0),
    "warmup_steps": integer(50, "demo: warm-up steps", 0),
    "weight_decay": number(0.01, "demo: AdamW weight decay", minimum=0),
    "max_grad_norm": number(1.0, "demo: clipping norm", exclusive_minimum=0),
    "eval_every": integer(100, "demo: steps between upstream-NLL evaluations in the log (0: never)", 0),
    "seed": integer(0, "demo: seed of the initial weights and example order", 0),
    "device": {"type": "string", "default": "cpu", "description": "demo: device to pretrain on"},
}

BASE = obj({
    "kind": choice("demo", ("demo", "pretrained"),
                   "demo: pretrain a tiny model on the demo corpus; pretrained: use `path`"),
    "path": {"type": ["string", "null"], "default": None,
             "description": "pretrained: a local model directory or a Hugging Face id"},
    "revision": {"type": ["string", "null"], "default": None, "description": "pretrained: HF revision"},
    **DEMO_BASE,
}, description="the base model", default={})

CORRELATIONS = obj({
    "semantic": {"type": "boolean", "default": True, "description": "correlate Z with MiniLM embedding cosine"},
    "gradient": {"type": "boolean", "default": True, "description": "correlate Z with projected gradient products"},
    "dim": integer(1024, "gradient projection dimension (count sketch)", 8),
    "max_task_examples": integer(1000, "training examples per task embedded / differentiated (reference: 1,000)", 1),
    "max_length": integer(1024, "tokens per example for gradients", 2),
    "batch_size": integer(64, "texts per embedding batch", 1),
    "seed": integer(0, "seed of the gradient projection", 0),
    "device": {"type": "string", "default": "auto", "description": "auto, cpu or cuda"},
}, description="the semantic and gradient correlation analyses", default={})
