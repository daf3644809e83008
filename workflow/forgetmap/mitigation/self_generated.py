"""Self-generated replay: replay text the base model writes itself instead of real upstream examples, for
the user without the pretraining data (the replayed count, the step budget and the mixing are replay's).

The replay selection draws the upstream examples as random replay does; their text is then replaced by
the base model's own, generated in the arm's job before training (the model is still the base):
`generation` settings (an arm key):
- `prompts: upstream`: a chat example's prompt is kept and its response generated through the chat
  template; an `lm` example keeps its first `prefix_tokens` tokens and the rest is generated;
- `prompts: none`: every replayed example is generated from nothing (the EOS token that starts a
  document), as plain text.
Sampled at `temperature` (default 1: the base's own distribution) and `top_p` from a generator seeded by the fine-tune's seed, so a run's replay is
reproducible; the tokens generated are the arm's generation cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .generate import chat_contexts, context_limit, continuations


def self_generated(model, tokenizer, frame: pd.DataFrame, arm: dict, settings: dict) -> tuple[pd.DataFrame, int]:
    """`frame` (the replayed upstream examples) with its texts replaced by the base model's; the tokens
    generated."""
    frame = frame.reset_index(drop=True).copy()
    n = len(frame)
    generation = arm["generation"]
    if generation["prompts"] == "none":
        contexts = [np.array([tokenizer.eos_token_id], dtype=np.int64)] * n
        texts, generated = _generate(model, tokenizer, contexts, generation, settings)
        return frame.assign(kind="lm", text=texts, prompt=None, response=None), generated
    kinds = frame["kind"].to_numpy()
    chat, lm = np.flatnonzero(kinds == "chat"), np.flatnonzero(kinds == "lm")
    contexts: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    for i, context in zip(chat, chat_contexts(tokenizer, frame["prompt"].iloc[chat].tolist(),
                                              settings["chat_template"],
                                              context_limit(model))):
        contexts[i] = context
    prefixes = {}
    for i in lm:
        ids = tokenizer(frame["text"].iloc[i], add_special_tokens=False)["input_ids"][:generation["prefix_tokens"]]
        prefixes[i] = tokenizer.decode(ids)
        contexts[i] = np.asarray([tokenizer.eos_token_id, *ids], dtype=np.int64)
    texts, generated = _generate(model, tokenizer, contexts, generation, settings)
    for i in chat:
        frame.loc[i, "response"] = texts[i]
    for i in lm:
        frame.loc[i, "text"] = prefixes[i] + texts[i]
    return frame, generated


def _generate(model, tokenizer, contexts, generation: dict, settings: dict) -> tuple[list[str], int]:
    temperature = 1.0 if generation["temperature"] is None else generation["temperature"]
    return continuations(model, tokenizer, contexts, generation["max_new_tokens"], temperature, generation["top_p"],
                         settings["seed"], settings.get("bf16", True))
