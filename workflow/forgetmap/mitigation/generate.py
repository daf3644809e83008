"""Text the base model writes itself, for the arms that train on it (self-generated replay, SDFT): the
contexts' continuations decoded, with how many tokens were generated (the arms' generation cost).

Generation is forgetmap.generation's (left-padded batches under a token budget, a KV cache, nucleus
sampling from a seeded generator, greedy at temperature 0), stopped at the tokenizer's EOS; a context
keeps its end where it alone would fill the model's positions (as training cuts an example), and each
answer may run to `max_new_tokens` or to the end of the positions, whichever comes first. The model is
the one about to be trained, its weights fp32: it generates inside training's autocast (bf16 on a GPU), as
flash-attention, picked for bf16 training on a GPU, takes only half precision.
"""

from __future__ import annotations

import numpy as np


def positions_of(model) -> int:
    """The context length the model was built for (4,096 where its config does not say)."""
    return getattr(model.config, "max_position_embeddings", None) or 4096


def continuations(model, tokenizer, contexts: list[np.ndarray], max_new_tokens: int, temperature: float,
                  top_p: float, seed: int, bf16: bool = True, token_budget: int = 8192) -> tuple[list[str], int]:
    """The decoded continuation of every context (special tokens dropped) and the tokens generated, in
    training's precision (`bf16`: the fine-tune's `bf16` setting)."""
    from ..generation import Sampling, budgets, generate_torch
    from ..models import autocast_for

    if tokenizer.eos_token_id is None:
        raise ValueError("the model's tokenizer has no EOS token: generation could not stop")
    limits = budgets([len(c) for c in contexts], max_new_tokens, positions_of(model))
    was_training = model.training
    model.eval()
    try:
        with autocast_for(next(model.parameters()).device, bf16):
            answers = generate_torch(model, tokenizer, contexts, limits, Sampling(temperature, top_p), seed,
                                     token_budget)
    finally:
        model.train(was_training)
    return answers.texts, int(answers.n_tokens.sum())


def context_limit(model) -> int:
    """The longest context that leaves room for one generated token within the model's positions (a context
    longer is cut at its start, as training cuts an example)."""
    return max(1, positions_of(model) - 1)


def chat_contexts(tokenizer, prompts: list[str], template: str, max_length: int) -> list[np.ndarray]:
    """Each prompt rendered as the model's chat turn up to where its response begins (at most `max_length`
    tokens, cut at the start)."""
    from ..data.chat import encode_chat

    encoded = encode_chat(tokenizer, prompts, ["x"] * len(prompts), template, max_length)
    return [e.ids[:e.target_start] for e in encoded]
