"""How a run is asked an item: the run decides, whatever the item's kind (Harmon et al.'s protocol).

A run's settings say how it asks (`ask`, chosen by the plan from the row's config):
- `plain`: plain text, as a base model is prompted: the question, then (for an option scored by its
  log-likelihood) the target delimiter and the option; `shots` solved items of the item's source first,
  each its question and gold answer, separated by blank lines (few-shot; zero-shot where shots is 0).
- `template`: through the run's chat template, zero-shot, as a post-trained model is prompted: the
  question is the user turn and the answer begins after the assistant marker.
- `item`: the paper's path (a model's base and its fine-tunes, zero-shot): each item in the format it is
  scored in, an `lm` item as plain text and a `chat` item through the model's chat template, the same for
  the base and every fine-tune, so Y compares like with like and Z's spans are untouched.

Solved items of a few-shot prefix are drawn from the item's source in the same shard without the item
itself, by a generator seeded with the item's id, so a run's prompts never depend on the other shards or
the run order.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from ..data.chat import chat_pieces

def asked(settings: dict) -> str:
    """How a run asks: its `ask` setting, else plain text where it has shots and the item's format where not."""
    return settings.get("ask") or ("plain" if settings.get("shots", 0) else "item")


def forms(settings: dict, kinds) -> list[str]:
    """Each item's prompt form, `plain` or `template`, under the run's way of asking."""
    ask = asked(settings)
    if ask == "item":
        return ["template" if kind == "chat" else "plain" for kind in kinds]
    return [ask] * len(kinds)


def shot_prefixes(frame: pd.DataFrame, rows: np.ndarray, solved: list[str], shots: int) -> list[str]:
    """Each item's few-shot prefix: `shots` other solved items of its source in the frame (fewer where the
    source has fewer), in an order drawn by a generator seeded with the item's id; '' when shots is 0."""
    if not shots:
        return [""] * len(rows)
    sources = frame["source"].to_numpy()[rows].astype(str)
    ids = frame["example_id"].to_numpy()[rows].astype(str)
    prefixes = []
    for i in range(len(rows)):
        pool = np.flatnonzero((sources == sources[i]) & (np.arange(len(rows)) != i))
        rng = np.random.default_rng(zlib.crc32(ids[i].encode()))
        chosen = rng.choice(pool, min(shots, len(pool)), replace=False) if len(pool) else []
        prefixes.append("".join(solved[j] + "\n\n" for j in chosen))
    return prefixes


def contexts(tokenizer, frame: pd.DataFrame, rows: np.ndarray, questions: list[str], golds: list[str],
             settings: dict) -> tuple[list[str], list[np.ndarray]]:
    """Each item's prompt as its run asks it: (the form, `plain` or `template`; the context's token ids).
    `questions[i]` is item i's question text, `golds[i]` its gold answer as a solved example shows it."""
    delimiter, template = settings["target_delimiter"], settings["chat_template"]
    how = forms(settings, frame["kind"].to_numpy()[rows])
    shots = settings.get("shots", 0)
    solved = [q + delimiter + g for q, g in zip(questions, golds)] if shots else []
    prefixes = shot_prefixes(frame, rows, solved, shots)
    out = []
    for form, prefix, question, gold in zip(how, prefixes, questions, golds):
        if form == "plain":
            ids = tokenizer(prefix + question, add_special_tokens=True)["input_ids"]
        else:
            ids = tokenizer(chat_pieces(tokenizer, question, gold, template)[0], add_special_tokens=False)["input_ids"]
        out.append(np.asarray(ids, dtype=np.int64))
    return how, out


def continuation(form: str, option: str, delimiter: str) -> str:
    """An option's text as it follows the context: after the delimiter in plain text, the assistant's
    whole reply through a template."""
    return delimiter + option if form == "plain" else option


def shown(tokenizer, frame: pd.DataFrame, rows: np.ndarray, ids: list[np.ndarray]) -> dict[str, str]:
    """One prompt per source, as the model reads it (special tokens kept): the record of what a run saw."""
    out: dict[str, str] = {}
    for i, row in enumerate(rows):
        source = str(frame["source"].iloc[row])
        if source not in out:
            out[source] = tokenizer.decode(ids[i].tolist(), skip_special_tokens=False)
    return out
