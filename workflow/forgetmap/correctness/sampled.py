"""Correctness as Harmon et al. measure it: every item answered by text *sampled* from the model with
several seeds (temperature, top-p, a cap on new tokens), the answer extracted from the text
(`forgetmap.correctness.extract`), each seed's answer judged on its own. Seed s of a run is later paired
with seed s of its reference (`transitions`).

The question a model sees: for a letter answer, a multiple-choice item's prompt (a trailing "Answer:" taken
off) with its options lettered A, B, C, ... and "Answer:" after them; otherwise the item's prompt as it is
(a `choice` answer names its option by its text, as a prompt that lists them asks). A `chat` item
is the user turn of the chat template; an `lm` item is plain text. Few-shot rows (`shots`) put solved
questions of the same source first (`items.shot_prefixes`), each with its gold letter or answer.

Per item the record keeps seed 0's extracted answer and correctness in `predicted` / `correct` (the
columns every measurement has: Y and its analyses use them), and every seed's raw text (`generations`),
extracted answer (`answers`, null where none was found) and correctness (`correct_seeds`), and the tokens
generated for it over all seeds (`n_generated`: what the measurement cost).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..data.upstream import present, scorable
from ..errors import DataError
from .extract import LETTERS, choose_extractor, extract, is_correct
from .items import rendered, shot_prefixes

log = logging.getLogger(__name__)
UNEXTRACTED_WARNING = 0.25  # a source whose share of unextracted answers is above this is reported loudly


@dataclass(frozen=True)
class Question:
    """One item as a generation request: its tokens, the gold answer and how the answer is read."""

    context: np.ndarray   # token ids
    gold: str             # the gold letter (multiple choice) or answer text
    k: int                # options; 0 for free form
    source: str
    extractor: str        # letter, choice, number, regex, exact
    pattern: str | None
    key: str = "upstream.NAME.answers"  # the config key that chose the extractor (named in errors)
    options: tuple[str, ...] = ()       # the option texts (multiple choice)


def question_text(prompt: str, options: list[str] | None) -> str:
    """The question as generated from: the options lettered after the prompt, then "Answer:"."""
    if not options:
        return prompt
    body = re.sub(r"\s*(?i:answer)\s*:\s*$", "", prompt)
    return body + "\n" + "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options)) + "\nAnswer:"


def extraction_of(settings: dict, source: str) -> tuple[str, str | None, str]:
    """(extractor, pattern, config key) configured for a source: its own entry, else the corpus's."""
    corpus = settings.get("extraction") or {}  # upstream.NAME.answers, and the corpus's name
    own = (corpus.get("sources") or {}).get(source) or {}
    key = f"upstream.{corpus.get('corpus', 'NAME')}.answers" + (f".sources.{source}" if own else "")
    return own.get("extract") or corpus.get("extract") or "auto", own.get("pattern") or corpus.get("pattern"), key


def encode_questions(tokenizer, frame: pd.DataFrame, settings: dict) -> tuple[np.ndarray, list[Question]]:
    """The row positions of the frame's items and each as a Question, under the run's template and shots."""
    rows = scorable(frame)
    template, delimiter = settings["chat_template"], settings["target_delimiter"]
    texts, golds, ks, how, choices = [], [], [], [], []
    for row in rows:
        record = frame.iloc[row]
        options = record.get("choices") if "choices" in frame else None
        options = [str(o) for o in options] if present(options) else None
        if options and record["answer"] not in options:
            raise DataError(f"item {record['example_id']!r}: answer {record['answer']!r} is not one of its choices")
        extractor, pattern, key = extraction_of(settings, str(record["source"]))
        extractor = choose_extractor(extractor, len(options or ()), str(record["answer"]))
        lettered = extractor == "letter" and bool(options)  # the options lettered after the prompt
        texts.append(question_text(record["prompt"], options if lettered else None))
        golds.append(LETTERS[options.index(record["answer"])] if lettered else str(record["answer"]))
        ks.append(len(options) if options else 0)
        how.append((extractor, pattern, key))
        choices.append(tuple(options or ()))
    kinds = frame["kind"].to_numpy()[rows]

    def question(i: int) -> tuple[str, str]:
        return rendered(tokenizer, kinds[i], texts[i], golds[i], template, delimiter)

    shots = settings.get("shots", 0)
    solved = ["".join(question(i)) for i in range(len(rows))] if shots else []
    prefixes = shot_prefixes(frame, rows, solved, shots)
    room = max(1, settings["max_length"] - settings["max_new_tokens"])
    questions = []
    for i, row in enumerate(rows):
        context = prefixes[i] + question(i)[0]
        ids = tokenizer(context, add_special_tokens=kinds[i] != "chat")["input_ids"]
        questions.append(Question(np.asarray(ids[-room:], dtype=np.int64), golds[i], ks[i],
                                  str(frame["source"].iloc[row]), *how[i], choices[i]))
    return rows, questions


def judge(questions: list[Question], texts: list[list[str]], n_generated: np.ndarray, settings: dict) -> pd.DataFrame:
    """The per-item record from each seed's generated text (`texts[seed][item]`) and the tokens generated per
    item; a `regex` extractor that finds no answer in any text of a source is an error naming the source
    and showing one text."""
    n_seeds = len(texts)
    answers = [[extract(texts[s][i], q.extractor, q.k, q.pattern, settings["stop"], q.options) for s in range(n_seeds)]
               for i, q in enumerate(questions)]
    correct = np.array([[is_correct(a, q.gold, q.extractor) for a in answers[i]] for i, q in enumerate(questions)],
                       dtype=np.int8).reshape(len(questions), n_seeds)
    missing = np.array([[a is None for a in row] for row in answers], dtype=bool).reshape(len(questions), n_seeds)
    sources = np.array([q.source for q in questions])
    for source in dict.fromkeys(q.source for q in questions):
        at = np.flatnonzero(sources == source)
        share = float(missing[at].mean())
        extractor, first = questions[at[0]].extractor, questions[at[0]]
        if share == 1.0 and extractor == "regex":
            raise DataError(f"config key {first.key}.pattern: source {source!r}: the pattern {first.pattern!r} matched "
                            f"none of {missing[at].size} generated answers; one of them: {texts[0][at[0]][:300]!r}")
        if share > UNEXTRACTED_WARNING:
            log.warning("source %r: no %s answer could be extracted from %.0f%% of %d generated answers (counted "
                        "wrong); one of them: %r", source, extractor, 100 * share, missing[at].size,
                        texts[0][at[0]][:200])
    return pd.DataFrame({
        "predicted": [a[0] or "" for a in answers], "correct": correct[:, 0],
        "margin": np.full(len(questions), np.nan, dtype=np.float32),
        "k": np.asarray([q.k for q in questions], dtype=np.int16),
        "generations": [[texts[s][i] for s in range(n_seeds)] for i in range(len(questions))],
        "answers": answers, "correct_seeds": [row.tolist() for row in correct],
        "n_generated": np.asarray(n_generated, dtype=np.int32)})


def seeds_of(settings: dict) -> list[int]:
    """The sampling seeds: `seeds` of them, from `seed` on."""
    return [settings["seed"] + s for s in range(settings["seeds"])]


def evaluate_torch(model, tokenizer, questions: list[Question], settings: dict) -> pd.DataFrame:
    """Sampled answers from a torch model, one generation pass per seed."""
    from .items import generate

    contexts = [q.context for q in questions]
    texts, n_generated = [], np.zeros(len(questions), dtype=np.int64)
    for seed in seeds_of(settings):
        tokens = generate(model, contexts, tokenizer.pad_token_id, tokenizer.eos_token_id, settings["max_new_tokens"],
                          settings["token_budget"], settings["temperature"], settings["top_p"], seed)
        texts.append([tokenizer.decode(t, skip_special_tokens=True) for t in tokens])
        n_generated += [len(t) for t in tokens]
    return judge(questions, texts, n_generated, settings)


def evaluate_vllm(llm, questions: list[Question], settings: dict) -> pd.DataFrame:  # pragma: no cover - GPU
    """The same answers from vLLM: one request per (item, seed), each with its own seed, in one call."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    seeds = seeds_of(settings)
    prompts = [TokensPrompt(prompt_token_ids=q.context.tolist()) for q in questions for _ in seeds]
    params = [SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"],
                             max_tokens=settings["max_new_tokens"], seed=seed) for _ in questions for seed in seeds]
    outputs = llm.generate(prompts, params)
    texts = [[outputs[i * len(seeds) + s].outputs[0].text for i in range(len(questions))] for s in range(len(seeds))]
    n_generated = [sum(len(outputs[i * len(seeds) + s].outputs[0].token_ids) for s in range(len(seeds)))
                   for i in range(len(questions))]
    return judge(questions, texts, np.asarray(n_generated), settings)
