"""Correctness as Harmon et al. measure it: every item answered by text *sampled* from the model with
several seeds (temperature, top-p, a cap on new tokens), the answer extracted from the text
(`forgetmap.correctness.extract`), each seed's answer judged on its own. Seed s of a run is later paired
with seed s of its reference (`transitions`).

The question a model sees: for a letter answer, a multiple-choice item's prompt (a trailing "Answer:" taken
off) with its options lettered A, B, C, ... and "Answer:" after them; otherwise the item's prompt as it is
(a `choice` answer names its option by its text, as a prompt that lists them asks). It is asked as the
run asks, whatever the item's kind (`forgetmap.correctness.prompts`): a base plain text with `shots`
solved questions of the same source first, each with its gold letter or answer; a post-trained row
zero-shot through its chat template, the question as the user turn.

Generation is `forgetmap.generation`'s: the question is never cut, each answer may run to
`min(max_new_tokens, positions - question)` tokens, and it ends at the first stop string; every extractor
reads the text before that stop string. A question that alone fills the model's positions stops the job,
naming the item (`items.check_room`).

Per item the record keeps seed 0's extracted answer and correctness in `predicted` / `correct` (the
columns every measurement has: Y and its analyses use them), and every seed's text up to its first stop
string (`generations`), extracted answer (`answers`, null where none was found) and correctness
(`correct_seeds`), the tokens generated for it over all seeds (`n_generated`: what the measurement cost),
and how many seeds' answers its budget ended before an EOS or a stop string (`n_capped`; the job warns
where that share is large).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..data.upstream import present, scorable
from ..errors import DataError
from ..generation import Answers, Sampling, until_stop
from .extract import LETTERS, choose_extractor, extract, is_correct
from .items import answer_budgets
from .prompts import contexts

log = logging.getLogger(__name__)
UNEXTRACTED_WARNING = 0.25  # a source whose share of unextracted answers is above this is reported loudly
CAPPED_WARNING = 0.25       # likewise for answers their budget cut short


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
    """The row positions of the frame's items and each as a Question, asked as the run asks (never cut)."""
    rows = scorable(frame)
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
    ids = contexts(tokenizer, frame, rows, texts, golds, settings)[1] if len(rows) else []
    sources = frame["source"].to_numpy()[rows].astype(str)
    return rows, [Question(ids[i], golds[i], ks[i], str(sources[i]), *how[i], choices[i]) for i in range(len(rows))]


def judge(questions: list[Question], generated: list[Answers], settings: dict) -> pd.DataFrame:
    """The per-item record from each seed's answers (`generated[seed]`), every extractor reading the text
    before the first stop string; a `regex` extractor that finds no answer in any text of a source is an
    error naming the source and showing one text."""
    n_seeds = len(generated)
    texts = [[until_stop(t, settings["stop"]) for t in seed.texts] for seed in generated]
    answers = [[extract(texts[s][i], q.extractor, q.k, q.pattern, settings["stop"], q.options) for s in range(n_seeds)]
               for i, q in enumerate(questions)]
    capped = np.stack([seed.capped for seed in generated], axis=1).reshape(len(questions), n_seeds)
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
        cut = float(capped[at].mean())
        if cut > CAPPED_WARNING:
            log.warning("source %r: %.0f%% of %d answers ran to their budget (max_new_tokens %d, or the positions "
                        "their question left) before an EOS or a stop string; raise score.correctness.max_new_tokens "
                        "if they were cut short", source, 100 * cut, capped[at].size, settings["max_new_tokens"])
    return pd.DataFrame({
        "predicted": [a[0] or "" for a in answers], "correct": correct[:, 0],
        "margin": np.full(len(questions), np.nan, dtype=np.float32),
        "k": np.asarray([q.k for q in questions], dtype=np.int16),
        "generations": [[texts[s][i] for s in range(n_seeds)] for i in range(len(questions))],
        "answers": answers, "correct_seeds": [row.tolist() for row in correct],
        "n_generated": np.asarray(sum(seed.n_tokens for seed in generated), dtype=np.int32),
        "n_capped": capped.sum(axis=1).astype(np.int8)})


def seeds_of(settings: dict) -> list[int]:
    """The sampling seeds: `seeds` of them, from `seed` on."""
    return [settings["seed"] + s for s in range(settings["seeds"])]


def sampling(settings: dict) -> Sampling:
    """The run's sampling: temperature, nucleus mass and stop strings."""
    return Sampling(settings["temperature"], settings["top_p"], tuple(settings["stop"]))


def evaluate_torch(model, tokenizer, questions: list[Question], settings: dict) -> pd.DataFrame:
    """Sampled answers from a torch model, one generation pass per seed."""
    from ..generation import generate_torch

    contexts = [q.context for q in questions]
    limits = answer_budgets(contexts, settings)
    generated = [generate_torch(model, tokenizer, contexts, limits, sampling(settings), seed, settings["token_budget"])
                 for seed in seeds_of(settings)]
    return judge(questions, generated, settings)


def evaluate_vllm(llm, questions: list[Question], settings: dict) -> pd.DataFrame:  # pragma: no cover - GPU
    """The same answers from vLLM: one request per (item, seed), each with its own seed, in one call."""
    from ..generation import generate_vllm

    contexts = [q.context for q in questions]
    generated = generate_vllm(llm, contexts, answer_budgets(contexts, settings),
                              sampling(settings), seeds_of(settings))
    return judge(questions, generated, settings)
