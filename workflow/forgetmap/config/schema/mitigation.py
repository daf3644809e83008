"""Forgetting less: the arms (replay, token masks, anchors, freezing, EMA, LoRA; a knob may be swept) and how
they are judged."""

from __future__ import annotations

from .fields import NAME, choice, integer, number, obj


def knob(description: str, kind: str = "number", minimum=None, maximum_exclusive=None, minimum_exclusive=None) -> dict:
    """An arena knob: a value, or a list of values the arm's job sweeps (null: not set)."""
    bounds = {k: v for k, v in (("minimum", minimum), ("exclusiveMaximum", maximum_exclusive),
                                ("exclusiveMinimum", minimum_exclusive)) if v is not None}
    return {"type": [kind, "array", "null"], **bounds, "items": {"type": kind, **bounds}, "minItems": 1,
            "uniqueItems": True, "default": None, "description": description + " (a list: swept)"}


ARM = obj({
    "replay": choice("none", ("none", "random", "predicted", "ground_truth", "high_base_nll", "online",
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
    "prediction_seed": integer(0, "predicted replay: which seed's known columns the prediction used (paper: 0)", 0),
    "statistic": choice("loss", ("loss", "forgotten_1to0"),
                        "predicted and ground_truth replay: the scores' statistic; loss: the (predicted) forgetting Z "
                        "(the paper); forgotten_1to0: P(Y = 1), the (predicted) chance that a base-correct item is "
                        "answered wrong after the fine-tune (`method` then names a correctness.methods predictor); only "
                        "base-correct items with an answer are candidates"),
    "risk": {"type": "number", "default": 0.0,
             "description": "predicted replay: weight beta of the prediction's uncertainty; the scores become "
                            "mu + beta * h, h the conformal half-width at `risk_level` (risk-aware replay; 0: mu alone)"},
    "risk_level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.9,
                   "description": "predicted replay with risk: the interval level (one of prediction.intervals)"},
    "probes": integer(30, "online replay: upstream examples whose forgetting is measured during training (paper: 30)", 1),
    "probe_selection": choice("random", ("random", "dopt", "medoids"),
                              "online replay: how its probes are chosen from the pool (forgetmap.predict.probes; "
                              "dopt and medoids use the split's train rows)"),
    "warmup": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.1,
               "description": "online replay: share of the steps trained with random replay before the probes "
                              "are measured (paper: 0.1)"},
    "ratio": number(0.03125, "replayed examples per task example (paper: 1/32); the steps grow by (1 + ratio)",
                    exclusive_minimum=0),
    "temperature": number(0.1, "softmax temperature of the replay weights (paper: 0.1)", exclusive_minimum=0),
    "selection": choice("sample", ("sample", "max"), "sample: draw with the softmax weights, without replacement "
                                                     "(the paper's runs); max: the top scores"),
    "tokens": choice("none", ("none", "stm", "stm_random"),
                     "stm: mask response tokens the base model finds high-perplexity; stm_random: as many masked "
                     "tokens at random positions (the control)"),
    "stm_mode": choice("quantile", ("quantile", "abs"), "quantile: mask the top q of the task's response tokens by "
                                                        "base NLL; abs: mask tokens with base perplexity above tau"),
    "tau": number(2.5, "STM abs mode: perplexity threshold (Wu et al.: 2.5)", exclusive_minimum=0),
    "q": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.2,
          "description": "STM quantile mode: share of response tokens masked"},
    "weights": choice("none", ("none", "flow"), "flow: weight each task example by exp(-base loss / tau), tau the "
                                               "median base loss (Sanyal et al., ICML 2025)"),
    "targets": choice("original", ("original", "sdft"),
                      "sdft: the base model rewrites each training response, shown the prompt and the reference, and "
                      "the rewrite replaces it where it still carries the answer (Yang et al., ACL 2024)"),
    "generation": obj({
        "prompts": choice("upstream", ("upstream", "none"),
                          "self-generated replay: continue the drawn upstream examples' prompts (chat) or first "
                          "`prefix_tokens` tokens (lm), or generate from nothing"),
        "prefix_tokens": integer(8, "self-generated replay from upstream lm examples: tokens of each kept as its prompt", 0),
        "temperature": {"type": ["number", "null"], "minimum": 0, "default": None,
                        "description": "sampling temperature (null: 1 for self-generated replay, 0 (greedy) for SDFT)"},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0,
                  "description": "nucleus sampling mass"},
        "max_new_tokens": integer(64, "tokens generated at most per text (stopped at EOS)", 1),
    }, description="self-generated replay and SDFT: how the base model writes", default={}),
    "lora": {"type": ["object", "null"], "default": None, "additionalProperties": False,
             "properties": {"r": knob("LoRA rank", "integer", minimum=1),
                            "alpha": {"type": "number", "exclusiveMinimum": 0, "description": "LoRA alpha"},
                            "dropout": {"type": "number", "minimum": 0, "description": "LoRA dropout"},
                            "target_modules": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                               "description": "modules that get adapters"}},
             "description": "LoRA as a mitigation: the arm fine-tunes adapters (keys not given: the model's "
                            "finetune.lora); a list of ranks is swept"},
    "lr": knob("the peak learning rate of the arm's fine-tunes (null: the model's; LoRA usually wants a larger "
               "one; a list sweeps it, as early stopping and a smaller step size would)", minimum_exclusive=0),
    "l2_sp": knob("L2-SP: the loss gains lambda/2 * ||theta - theta_0||^2 over the trained parameters (Li et al., "
                  "2018)", minimum=0),
    "kl_base": knob("KL anchor: the loss gains beta * KL(p_base || p_theta) on the task's target tokens (the base: "
                    "a frozen copy, or under LoRA the adapter switched off)", minimum=0),
    "train_top": knob("layer freezing: only the top n transformer blocks train", "integer", minimum=1),
    "train_modules": {"type": ["array", "null"], "items": {"type": "string", "minLength": 1}, "minItems": 1,
                      "default": None, "description": "layer freezing: only these modules train (matched as LoRA's "
                                                      "target_modules: mlp, self_attn, lm_head, layers.3)"},
    "ema": knob("EMA of the weights with this decay, the result the slow weights (SuRe); a modifier of any arm",
                maximum_exclusive=1, minimum=0),
}, description="a mitigation arm: replay, token masks, example weights, LoRA, anchors, freezing and EMA combine; "
              "at most one knob (lr, lora.r, l2_sp, kl_base, train_top, ema) is a list, swept inside the arm's job")

MITIGATION = obj({
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
    "heldout_seed": integer(0, "seed of the held-out draw", 0),
    "level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "default": 0.95,
              "description": "level of the bootstrap intervals"},
    "interpolation": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "uniqueItems": True,
                      "default": [], "description": "WiSE-FT: every fine-tune of every arm (plain fine-tuning too) is "
                                                    "also judged at theta = (1 - a) theta_base + a theta_ft for each a "
                                                    "(LoRA: the adapter scaled by a), without training again"},
}, description="forgetting less: arms fine-tuned on the test tasks, judged on held-out upstream examples",
   default={})
