"""Turning examples into token ids with their loss and scoring spans (paper §1.1, §1.7).

- `lm` examples: the raw text tokenized as the model's tokenizer does by default (as vLLM does);
  every token but the first is a target; long texts keep their first `max_length` tokens.
- `chat` examples: the prompt and response rendered by a chat template. The prefix (everything up to
  and including the assistant marker) and the rest are tokenized separately, so the response starts
  at an exact token boundary. Training targets are the response tokens plus the template's closing
  tokens (the EOS, as the paper's labels); the scored span is the response tokens only, without the
  closing EOS and without padding. Long examples keep their last `max_length` tokens, as the paper's
  left truncation does.

Templates: `olmo` is the OLMo-Instruct format the paper applies to every base model
(`<eos><|user|>\\n{prompt}\\n<|assistant|>\\n{response}<eos>`); `tokenizer` uses the tokenizer's own
chat template (instruct models); `auto` (the default) is the tokenizer's own where it has one, else
`olmo`. Every encoded example records how many tokens truncation cut (`cut`), so jobs can say it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEMPLATES = ("auto", "olmo", "tokenizer")


@dataclass(frozen=True)
class Encoded:
    """Token ids of one example; targets are positions [target_start, len), scored [target_start, score_end).

    Training may narrow the targets with `loss_mask` (one bool per position; False: that token carries
    no loss, as low-perplexity token training masks) and scale the example's loss by `weight`."""

    ids: np.ndarray
    target_start: int
    score_end: int
    loss_mask: np.ndarray | None = None
    weight: float = 1.0
    cut: int = 0  # tokens truncation removed (max_length)

    @property
    def n_scored(self) -> int:
        return max(0, self.score_end - self.target_start)

    def target_positions(self) -> np.ndarray:
        """The positions whose token is a training target: the target span, less what the mask drops."""
        positions = np.arange(self.target_start, len(self.ids))
        return positions if self.loss_mask is None else positions[self.loss_mask[self.target_start:]]

    @property
    def n_targets(self) -> int:
        """Training targets actually kept (the loss normaliser counts these)."""
        if self.loss_mask is None:
            return max(0, len(self.ids) - self.target_start)
        return int(np.count_nonzero(self.loss_mask[self.target_start:]))


def template_in_use(tokenizer, template: str) -> str:
    """The template `auto` stands for with this tokenizer: its own chat template if it has one, else olmo."""
    if template == "auto":
        return "tokenizer" if getattr(tokenizer, "chat_template", None) else "olmo"
    return template


def chat_pieces(tokenizer, prompt: str, response: str, template: str) -> tuple[str, str, str]:
    """(prefix, response, suffix) texts of a chat example under `template`."""
    template = template_in_use(tokenizer, template)
    eos = tokenizer.eos_token or ""
    if template == "olmo":
        return f"{eos}<|user|>\n{prompt}\n<|assistant|>\n", response, eos
    if template == "tokenizer":
        full = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
            tokenize=False)
        at = full.rfind(response)
        if at < 0:
            raise ValueError("the tokenizer's chat template does not reproduce the response verbatim")
        return full[:at], response, full[at + len(response):]
    raise ValueError(f"unknown chat template {template!r}; allowed: {', '.join(TEMPLATES)}")


def _tokenize(tokenizer, texts: list[str], special: bool) -> list[list[int]]:
    if not texts:
        return []
    return tokenizer(texts, add_special_tokens=special)["input_ids"]


def encode_lm(tokenizer, texts: list[str], max_length: int) -> list[Encoded]:
    out = []
    for ids in _tokenize(tokenizer, texts, special=True):
        cut = max(0, len(ids) - max_length)
        ids = np.asarray(ids[:max_length], dtype=np.int64)
        out.append(Encoded(ids, 1, len(ids), cut=cut))
    return out


def encode_chat(tokenizer, prompts: list[str], responses: list[str], template: str,
                max_length: int) -> list[Encoded]:
    pieces = [chat_pieces(tokenizer, p, r, template) for p, r in zip(prompts, responses)]
    prefixes = _tokenize(tokenizer, [p[0] for p in pieces], special=False)
    bodies = _tokenize(tokenizer, [p[1] for p in pieces], special=False)
    suffixes = _tokenize(tokenizer, [p[2] for p in pieces], special=False)
    out = []
    for prefix, body, suffix in zip(prefixes, bodies, suffixes):
        ids = np.asarray(prefix + body + suffix, dtype=np.int64)
        start, end = len(prefix), len(prefix) + len(body)
        cut = max(0, len(ids) - max_length)
        ids = ids[cut:]
        out.append(Encoded(ids, max(1, start - cut), max(0, end - cut), cut=cut))
    return out


def scored_bytes(tokenizer, encoded: list[Encoded]) -> np.ndarray:
    """UTF-8 bytes of each example's scored span as the tokenizer decodes it (special tokens left out): the
    denominator of bits per byte, the same text whatever the tokenizer (int32)."""
    spans = [e.ids[e.target_start:e.score_end].tolist() for e in encoded]
    texts = tokenizer.batch_decode(spans, skip_special_tokens=True) if spans else []
    return np.array([len(t.encode("utf-8")) for t in texts], dtype=np.int32)


def truncation(encoded: list[Encoded], max_length: int, what: str = "examples") -> dict:
    """How much truncation at `max_length` cut: examples cut, their tokens removed (total and largest);
    a job's log says so whenever it cut anything."""
    cuts = np.array([e.cut for e in encoded], dtype=np.int64)
    report = {"max_length": max_length, "truncated": int(np.count_nonzero(cuts)),
              "truncated_tokens": int(cuts.sum()), "truncated_tokens_max": int(cuts.max(initial=0))}
    if report["truncated"]:
        import logging

        logging.getLogger(__name__).warning(
            "%d of %d %s were longer than max_length %d and lost %d tokens (at most %d in one)", report["truncated"],
            len(encoded), what, max_length, report["truncated_tokens"], report["truncated_tokens_max"])
    return report


def encode_examples(tokenizer, frame, template: str, max_length: int) -> list[Encoded]:
    """Encode an upstream frame (columns `kind`, `text`, `prompt`, `response`) in its row order."""
    kinds = frame["kind"].to_numpy()
    encoded: list[Encoded | None] = [None] * len(frame)
    lm = np.flatnonzero(kinds == "lm")
    chat = np.flatnonzero(kinds == "chat")
    for i, e in zip(lm, encode_lm(tokenizer, frame["text"].iloc[lm].tolist(), max_length)):
        encoded[i] = e
    for i, e in zip(chat, encode_chat(tokenizer, frame["prompt"].iloc[chat].tolist(),
                                      frame["response"].iloc[chat].tolist(), template, max_length)):
        encoded[i] = e
    return encoded
