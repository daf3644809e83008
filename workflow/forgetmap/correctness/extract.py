"""The answer in a generated text (Harmon et al. score sampled chain-of-thought answers this way).

One extractor per item, chosen per corpus or source (`upstream.NAME.answers`):
- `letter`: a multiple-choice letter among the item's k options, found as LightEval's letter extraction
  and lm-evaluation-harness's `multi_choice_regex` find it: the last "answer is (X)", else the last
  "Answer: X", else the last "(X)", else the last letter standing alone ("B." / "B)" / "B" at a line's
  end). Letters outside the item's k options are never taken.
- `number`: lm-evaluation-harness's GSM8K extraction: the number after "####" (strict match), else the
  last number in the text (flexible extract); "$", thousands separators and a trailing period removed,
  compared with the gold answer as numbers (a gold solution such as GSM8K's "... #### 72" gives its
  final number).
- `choice`: a multiple-choice option named by its text (the prompt lists the options as text): the
  generation, cut at the first stop string, equal to an option after SQuAD normalisation, else the option
  the text names last; free-form items are read as `exact`.
- `regex`: the user's pattern; its first group (or the whole match) at the first match, compared with the
  gold answer after SQuAD normalisation.
- `exact`: the text cut at the first stop string, SQuAD-normalised exact match (the greedy measurement's
  rule).
- `auto`: `letter` for multiple choice, `number` where the gold answer is a number, else `exact`.

An answer that cannot be extracted is `None`: wrong, and counted (the unextracted share).
"""

from __future__ import annotations

import re

from .items import cut_at_stop, normalize_answer

EXTRACTORS = ("auto", "letter", "choice", "number", "regex", "exact")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LETTER_PATTERNS = (re.compile(r"(?i:answer is)\s*:?\s*\(?([A-Z])\b\)?"),
                   re.compile(r"(?i:answer)\s*:\s*\(?([A-Z])\b\)?"),
                   re.compile(r"\(([A-Z])\)"),
                   re.compile(r"(?:^|\s)([A-Z])(?:[.)]|[ \t]*$)", re.M))
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
STRICT_NUMBER = re.compile(r"####\s*(-?\$?\d[\d,]*(?:\.\d+)?)")


def choose_extractor(extractor: str, k: int, gold: str) -> str:
    """The extractor `auto` stands for, given the item's option count and gold answer."""
    if extractor == "choice" and k < 2:
        return "exact"
    if extractor != "auto":
        return extractor
    if k >= 2:
        return "letter"
    return "number" if as_number(gold) is not None or STRICT_NUMBER.search(gold) else "exact"


def as_number(text: str) -> float | None:
    """A number as written in an answer ("$1,234.", "-7", "3.50"), or None."""
    cleaned = text.strip().replace("$", "").replace(",", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def extract(text: str, extractor: str, k: int = 0, pattern: str | None = None, stop=(), options=()) -> str | None:
    """The answer an extractor finds in a generated text, or None."""
    if extractor == "choice":
        answer = normalize_answer(cut_at_stop(text, list(stop)))
        named = {normalize_answer(o): o for o in options}
        if answer in named:
            return named[answer]
        last = max(((answer.rfind(n), o) for n, o in named.items() if n and answer.rfind(n) >= 0), default=None,
                   key=lambda m: m[0])
        return last[1] if last else None
    if extractor == "letter":
        allowed = LETTERS[:k]
        for regex in LETTER_PATTERNS:
            found = [m.group(1) for m in regex.finditer(text) if m.group(1) in allowed]
            if found:
                return found[-1]
        return None
    if extractor == "number":
        strict = STRICT_NUMBER.findall(text)
        found = strict or NUMBER.findall(text)
        return found[-1].replace("$", "").replace(",", "").rstrip(".") if found else None
    if extractor == "regex":
        match = re.search(pattern, text)
        if match is None:
            return None
        return match.group(1) if match.groups() else match.group(0)
    if extractor == "exact":
        answer = cut_at_stop(text, list(stop))
        return answer or None
    raise ValueError(f"unknown extractor {extractor!r}; known: {', '.join(EXTRACTORS)}")


def is_correct(answer: str | None, gold: str, extractor: str) -> bool:
    """Does an extracted answer match the gold one (a letter, a number, a normalised text)?"""
    if answer is None:
        return False
    if extractor in ("letter", "choice"):
        return answer == gold
    if extractor == "number":
        theirs = as_number(gold)
        if theirs is None:  # a worked solution: its final number
            final = extract(gold, "number")
            theirs = as_number(final) if final is not None else None
        mine = as_number(answer)
        return mine is not None and theirs is not None and abs(mine - theirs) <= 1e-9 * max(1.0, abs(theirs))
    return normalize_answer(answer) == normalize_answer(gold)
