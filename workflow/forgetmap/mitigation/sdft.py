"""Self-distillation of the targets (SDFT; Yang et al., ACL 2024): before fine-tuning, the base model
rewrites each training response in its own words, shown the prompt and the reference answer; the
rewrite replaces the response where it still carries the answer, else the original stays. Training on
text closer to the base's own distribution moves the model less (their finding; forgetmap measures it).

The rewriting prompt is Yang et al.'s ("Below are an instruction that describes a task along with a
reference answer. Using the reference answer as a guide, write your own response."), rendered through the
model's chat template; generation is greedy unless `generation.temperature` says otherwise. "Carries the
answer": the reference's number as forgetmap.correctness.extract's GSM8K extraction finds it (after "####",
else the last), else the whole reference, appears in the
rewrite after the normalisation exact-match scoring uses (case, articles, punctuation, spaces).
"""

from __future__ import annotations

import pandas as pd

from .generate import chat_contexts, context_limit, continuations

REWRITE = ("Below are an instruction that describes a task along with a reference answer. Using the reference "
           "answer as a guide, write your own response.\n### Instruction:\n{prompt}\n### Reference Answer:\n"
           "{response}\n### Response:\n")


def carries_answer(rewrite: str, reference: str) -> bool:
    """Does the rewrite still hold the reference's answer (its number as the GSM8K extraction finds it, or
    else all of it)?"""
    from ..correctness.extract import extract
    from ..correctness.items import normalize_answer

    answer = extract(reference, "number") or reference
    wanted = normalize_answer(answer)
    return bool(wanted) and wanted in normalize_answer(rewrite)


def distilled(model, tokenizer, frame: pd.DataFrame, generation: dict, settings: dict) -> tuple[pd.DataFrame, dict]:
    """The training frame (prompt, response) with each response replaced by the base's rewrite where that
    carries the answer; facts: the share kept and the tokens generated."""
    prompts = [REWRITE.format(prompt=p, response=r) for p, r in zip(frame["prompt"], frame["response"])]
    contexts = chat_contexts(tokenizer, prompts, settings["chat_template"],
                             context_limit(model))
    temperature = 0.0 if generation["temperature"] is None else generation["temperature"]
    rewrites, generated = continuations(model, tokenizer, contexts, generation["max_new_tokens"], temperature,
                                        generation["top_p"], settings["seed"], settings.get("bf16", True))
    keep = [bool(r.strip()) and carries_answer(r, ref) for r, ref in zip(rewrites, frame["response"])]
    out = frame.copy()
    out["response"] = [r.strip() if k else ref for r, ref, k in zip(rewrites, frame["response"], keep)]
    return out, {"sdft_kept": round(sum(keep) / max(1, len(keep)), 6), "generated_tokens": generated}
