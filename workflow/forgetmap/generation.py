"""Generation, in one home: every text a model writes here (items' greedy and sampled answers, the arena's
self-generated replay and SDFT targets), on torch or on vLLM, with one rule for the prompt's room, the
answer's budget and the stop strings.

- A prompt is never cut. Its answer may run to `min(max_new_tokens, positions - len(prompt))` tokens, so
  it ends where the model's context is full (Harmon et al. let chain-of-thought answers run so); a prompt
  that alone fills the positions has no room and is the caller's error to name
  (`correctness.items.check_room`).
- A generation ends at EOS, at its budget, or as soon as its text holds a stop string (a check per
  sequence on torch; vLLM's `stop`), and its text is cut before the first stop string (`until_stop`),
  as lm-evaluation-harness's `until` cuts it.
- Each answer says whether its budget ended it (`capped`: it ran to its budget with no EOS and no stop
  string), so a measurement can say how many answers the cap cut short.
- torch: left-padded batches under a token budget with a KV cache, greedy at temperature 0, else nucleus
  sampling from a generator seeded per call (the same contexts and seed give the same texts); vLLM: one
  request per (prompt, seed), each with its own seed, in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen and where a text ends: temperature 0 is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answers:
    """One generation per prompt: its tokens (EOS left out), its text up to the first stop string, and
    whether its budget ended it."""

    tokens: list[np.ndarray]
    texts: list[str]
    capped: np.ndarray  # bool per prompt

    @property
    def n_tokens(self) -> np.ndarray:
        return np.array([len(t) for t in self.tokens], dtype=np.int64)


def budgets(lengths, max_new_tokens: int, positions: int | None) -> np.ndarray:
    """Each prompt's answer budget: `max_new_tokens`, less where the prompt leaves fewer of the model's
    positions (unknown positions: no such limit). Prompts that leave none get 0."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if positions is None:
        return np.full(len(lengths), max_new_tokens, dtype=np.int64)
    return np.clip(positions - lengths, 0, max_new_tokens).astype(np.int64)


def until_stop(text: str, stop) -> str:
    """The text before the first stop string it holds (all of it where it holds none)."""
    cut = min((at for at in (text.find(s) for s in stop) if at >= 0), default=len(text))
    return text[:cut]


def sample_top_p(logits, temperature: float, top_p: float, generator):
    """One token per row drawn from softmax(logits / temperature) restricted to the smallest set of tokens
    whose probability reaches top_p (nucleus sampling, as vLLM and transformers sample)."""
    import torch

    probs = torch.softmax(logits / temperature, dim=-1)
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(-1) - ordered > top_p  # the first token is always kept
    ordered = ordered.masked_fill(outside, 0.0)
    pick = torch.multinomial(ordered / ordered.sum(-1, keepdim=True), 1, generator=generator)
    return order.gather(-1, pick)[:, 0]


class _StopWatch:
    """Which rows' texts hold a stop string, checked on the last tokens only: a stop string of n characters
    spans at most 4n + 1 tokens of a byte-level vocabulary (at least one byte per token, at most four bytes
    per character), so a stop is seen at the step that completes it."""

    def __init__(self, tokenizer, stop: tuple[str, ...]):
        self.tokenizer, self.stop = tokenizer, stop
        self.window = 4 * max((len(s) for s in stop), default=0) + 2

    def stopped(self, generated: list[list[int]], rows) -> list[int]:
        tails = [generated[r][-self.window:] for r in rows]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        return [r for r, text in zip(rows, texts) if any(s in text for s in self.stop)]


def generate_torch(model, tokenizer, contexts: list[np.ndarray], limits: np.ndarray, sampling: Sampling = Sampling(),
                   seed: int = 0, token_budget: int = 8192) -> Answers:
    """Each context's continuation (up to its budget in `limits`), batched under `token_budget` padded tokens."""
    import torch

    from .models import cache_keyword
    from .nll import length_batches

    device = next(model.parameters()).device
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    pad_id = eos_id if pad_id is None else pad_id
    generator = torch.Generator(device=device).manual_seed(seed) if sampling.temperature > 0 else None
    watch = _StopWatch(tokenizer, tuple(sampling.stop)) if sampling.stop else None
    keyword = cache_keyword(model)
    limits = np.asarray(limits, dtype=np.int64)
    lengths = np.array([len(c) for c in contexts], dtype=np.int64)
    tokens: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(contexts)
    ended = np.zeros(len(contexts), dtype=bool)  # by EOS or a stop string, not by the budget
    with torch.inference_mode():
        for batch in length_batches(lengths + limits, token_budget, 1.0):
            width = int(lengths[batch].max())
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, width - lengths[i]:] = torch.from_numpy(np.asarray(contexts[i], dtype=np.int64))
                attention[r, width - lengths[i]:] = 1
            ids, attention = ids.to(device), attention.to(device)
            limit = torch.from_numpy(limits[batch]).to(device)
            done = limit <= 0
            written: list[list[int]] = [[] for _ in batch]
            cache, step_ids = None, ids
            for step in range(int(limits[batch].max(initial=0))):
                positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
                result = model(input_ids=step_ids, attention_mask=attention, position_ids=positions,
                               **{keyword: cache}, use_cache=True, logits_to_keep=1)  # the next token's only
                cache = getattr(result, keyword)
                logits = result.logits[:, -1].float()
                token = (sample_top_p(logits, sampling.temperature, sampling.top_p, generator) if generator is not None
                         else logits.argmax(-1))
                active = ~done
                token = torch.where(active, token, torch.full_like(token, pad_id))
                host, live = token.cpu().numpy(), np.flatnonzero(active.cpu().numpy())
                for r in live:
                    if eos_id is not None and host[r] == eos_id:
                        ended[batch[r]] = True
                    else:
                        written[r].append(int(host[r]))
                finished = torch.zeros_like(done)
                if eos_id is not None:
                    finished |= token == eos_id
                if watch is not None:
                    rows = [r for r in live if not ended[batch[r]]]
                    for r in watch.stopped(written, rows) if rows else []:
                        ended[batch[r]] = True
                        finished[r] = True
                done = done | finished | (step + 1 >= limit)
                if bool(done.all()):
                    break
                step_ids = token[:, None]
                attention = torch.cat([attention, torch.ones_like(step_ids)], dim=1)
            for r, i in enumerate(batch):
                tokens[i] = np.asarray(written[r], dtype=np.int64)
    texts = [until_stop(t, sampling.stop) for t in tokenizer.batch_decode([t.tolist() for t in tokens],
                                                                          skip_special_tokens=True)]
    capped = ~ended & (np.array([len(t) for t in tokens]) >= limits)
    return Answers(tokens, texts, capped)


def generate_vllm(llm, contexts: list[np.ndarray], limits: np.ndarray, sampling: Sampling,
                  seeds: list[int]) -> list[Answers]:  # pragma: no cover - needs vLLM
    """Each context's continuation under every seed, one request per (context, seed) in one call: one
    `Answers` per seed. vLLM ends a request at its `stop` strings; its tokens are decoded here as the torch
    path decodes them (vLLM's own text holds back an unfinished UTF-8 character), EOS left out."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    tokenizer = llm.get_tokenizer()
    sent = [i for i in range(len(contexts)) if limits[i] > 0]
    prompts = [TokensPrompt(prompt_token_ids=np.asarray(contexts[i]).tolist()) for i in sent for _ in seeds]
    params = [SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=int(limits[i]),
                             stop=list(sampling.stop) or None, seed=seed) for i in sent for seed in seeds]
    outputs = llm.generate(prompts, params) if prompts else []
    out = []
    for s in range(len(seeds)):
        tokens = [np.zeros(0, dtype=np.int64)] * len(contexts)
        capped = np.zeros(len(contexts), dtype=bool)
        for n, i in enumerate(sent):
            answer = outputs[n * len(seeds) + s].outputs[0]
            ids = list(answer.token_ids)
            if ids and ids[-1] == tokenizer.eos_token_id:
                ids = ids[:-1]
            tokens[i] = np.asarray(ids, dtype=np.int64)
            capped[i] = answer.finish_reason == "length"
        texts = tokenizer.batch_decode([t.tolist() for t in tokens], skip_special_tokens=True)
        out.append(Answers(tokens, [until_stop(t, sampling.stop) for t in texts], capped))
    return out
