"""Text the base model writes itself, for the arms that train on it (self-generated replay, SDFT): the
contexts' continuations decoded, with how many tokens were generated (the arms' generation cost).

Generation is forgetmap.correctness.items' (left-padded batches under a token budget, a KV cache, nucleus
sampling from a seeded generator, greedy at temperature 0), stopped at the tokenizer's EOS.
"""

from __future__ import annotations

import numpy as np


def continuations(model, tokenizer, contexts: list[np.ndarray], max_new_tokens: int, temperature: float,
                  top_p: float, seed: int, token_budget: int = 8192) -> tuple[list[str], int]:
    """The decoded continuation of every context (special tokens dropped) and the tokens generated."""
    from ..correctness.items import generate

    if tokenizer.eos_token_id is None:
        raise ValueError("the model's tokenizer has no EOS token: generation could not stop")
    was_training = model.training
    model.eval()
    try:
        tokens = generate(model, contexts, tokenizer.pad_token_id, tokenizer.eos_token_id, max_new_tokens,
                          token_budget, temperature=temperature, top_p=top_p, seed=seed)
    finally:
        model.train(was_training)
    texts = [tokenizer.decode(t.tolist(), skip_special_tokens=True) for t in tokens]
    return texts, int(sum(len(t) for t in tokens))


def context_limit(model, max_new_tokens: int) -> int:
    """The longest context that leaves room for `max_new_tokens` within the model's positions (a context
    longer is cut at its start, as training cuts an example)."""
    positions = getattr(model.config, "max_position_embeddings", None) or 4096
    return max(1, positions - max_new_tokens)


def chat_contexts(tokenizer, prompts: list[str], template: str, max_length: int) -> list[np.ndarray]:
    """Each prompt rendered as the model's chat turn up to where its response begins (at most `max_length`
    tokens, cut at the start)."""
    from ..data.chat import encode_chat

    encoded = encode_chat(tokenizer, prompts, ["x"] * len(prompts), template, max_length)
    return [e.ids[:e.target_start] for e in encoded]
