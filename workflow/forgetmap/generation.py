"""Generation, in one home: every text a model writes here (items' greedy and sampled answers, the arena's
self-generated replay and SDFT targets), on torch or on vLLM, with one rule for the prompt's room, the
answer's budget and the stop strings.

- A prompt is never cut. Its answer may run to `min(max_new_tokens, positions - len(prompt))` tokens, so
  it ends where the model's context is full (Harmon et al. let chain-of-thought answers run so); a prompt
  that alone fills the positions has no room and is the caller's error to name
  (`correctness.items.check_room`).
- A generation ends at EOS, at its budget, or as soon as its text holds a stop string (on torch read back
  every `CHECK_EVERY` steps and cut at the token that completed it; vLLM's `stop`), and its text is cut
  before the first stop string (`until_stop`), as lm-evaluation-harness's `until` cuts it.
- Each answer says whether its budget ended it (`capped`: it ran to its budget with no EOS and no stop
  string), so a measurement can say how many answers the cap cut short.
- torch: left-padded batches sized by the key-value cache they hold (`cache_budget`: on a GPU, a share of
  its free memory), the decode loop's state kept on the device, greedy at temperature 0, else nucleus
  sampling from a generator seeded per call (the same contexts and seed give the same texts); vLLM: one
  request per (prompt, seed), each with its own seed, in one call.
- Ranks in step (`InStep`: a sharded model, whose every forward gathers weights across the ranks): every rank
  generates the same contexts in the same batches (the least cache budget of any rank), and a batch's decode
  loop ends when every rank's rows are done, so every rank runs the same forwards; the texts are rank 0's.
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


CHECK_EVERY = 8  # decode steps between reads back to the host (whether every row is done, stop strings)
CACHE_SHARE = 0.5  # of a GPU's memory free when generation begins: what its batches' key-value caches may hold


def kv_bytes_per_token(model) -> int:
    """A key and a value per layer, key-value head and dimension, for one token, in the model's dtype."""
    from .models import widths

    config = model.config
    _, _, kv_heads, head_dim, _ = widths(config)
    layers = config.get_text_config().num_hidden_layers
    return 2 * layers * kv_heads * head_dim * next(model.parameters()).element_size()


def cache_tokens(free_bytes: float, per_token: int) -> int:
    """The tokens of key-value cache a batch may hold where `free_bytes` are free beside the weights: the rule
    a job applies on its GPU (`cache_budget`) and planning applies to a card (forgetmap.memory)."""
    return max(1, int(CACHE_SHARE * free_bytes) // per_token)


def cache_budget(model, token_budget: int) -> tuple[int, str]:
    """The tokens (prompt and answer, over a batch's rows) whose key-value cache one batch may hold, and why:
    on a GPU, `CACHE_SHARE` of its memory free when generation begins, in the model's cache bytes per token
    (decoding is bound by memory, not arithmetic: the more rows the cache holds, the more tokens a step
    writes); on a CPU, `token_budget` (the arithmetic bounds it there)."""
    import torch

    device = next(model.parameters()).device
    if device.type != "cuda":
        return token_budget, f"{token_budget} tokens (the token budget, on the CPU)"
    # free on the device, and what torch's allocator holds reserved but unused (scoring's blocks, reused)
    free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    per_token = kv_bytes_per_token(model)
    tokens = cache_tokens(free, per_token)
    return tokens, (f"{tokens} tokens: {CACHE_SHARE:g} of the {free / 2**30:.1f} GiB free on {device} at "
                    f"{per_token / 2**10:.0f} KiB of keys and values per token")


class InStep:
    """The ranks of a sharded model generating together: they agree on the batches' cache budget (the least of
    any rank's free memory) and on when a batch's decode loop ends (when every rank's rows are done), so each
    runs the same forwards (a rank one forward short would wait in an all-gather forever); `texts` hands every
    rank rank 0's answers (greedy decoding on the same weights agrees across ranks up to the kernels' rounding,
    and the ranks must decide alike)."""

    def __init__(self, device):
        import torch.distributed as dist

        self.dist, self.device = dist, device

    def _reduce(self, value: int) -> int:
        import torch

        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MIN)
        return int(tensor.item())

    def least(self, value: int) -> int:
        return self._reduce(int(value))

    def all_done(self, done: bool) -> bool:
        return bool(self._reduce(int(done)))

    def texts(self, answers: "Answers") -> "Answers":
        shared = [answers if self.dist.get_rank() == 0 else None]
        self.dist.broadcast_object_list(shared, src=0)
        return shared[0]


class DynamicDecoding:
    """transformers' growing cache: the prompts read chunk by chunk, each call's mask as long as the tokens so far
    (any model, any device)."""

    def __init__(self, model, keyword: str, width: int, steps: int):
        self.model, self.keyword, self.width, self.cache = model, keyword, width, None
        self.forward = model

    def placed(self, attention, start: int, stop: int) -> dict:
        """What a call writing positions [start, stop) is told of where they are: the mask of the tokens so far."""
        return {"attention_mask": attention[:, :stop]}

    def prefill(self, ids, attention, chunk: int):
        """The prompts' forward in chunks of `chunk` positions (each chunk's activations bounded; the cache fills
        chunk by chunk): the last position's logits."""
        positions = (attention[:, :self.width].cumsum(-1) - 1).clamp(min=0)
        result = None
        for s in range(0, self.width, chunk):
            stop = min(s + chunk, self.width)
            result = self.model(input_ids=ids[:, s:stop], position_ids=positions[:, s:stop],
                                **{self.keyword: self.cache}, use_cache=True, logits_to_keep=1,
                                **self.placed(attention, s, stop))
            self.cache = getattr(result, self.keyword)
        return result.logits[:, -1]

    def step(self, token, attention, position, step: int):
        """One token per row through the model with the cache: the next logits (the cache grows in place)."""
        at = self.width + step - 1
        result = self.forward(input_ids=token[:, None], position_ids=position[:, None], **{self.keyword: self.cache},
                              use_cache=True, logits_to_keep=1, **self.placed(attention, at, at + 1))
        return result.logits[:, -1]


class StaticDecoding(DynamicDecoding):
    """A cache allocated whole for the batch's last step (transformers' StaticCache), so that every decode step has
    the same shapes: the whole rows' mask, and where the step writes (`cache_position`). On CUDA the decode step
    is the model's call compiled as transformers' `generate` compiles it for a static cache (`get_compiled_call`:
    CUDA graphs captured once and replayed, no launch or allocation per step); the prompts are read uncompiled."""

    def __init__(self, model, keyword: str, width: int, steps: int, compiled: bool):
        from transformers import StaticCache

        super().__init__(model, keyword, width, steps)
        self.cache = StaticCache(config=model.config, max_cache_len=width + steps)
        self.forward = model.get_compiled_call(None) if compiled else model

    def placed(self, attention, start: int, stop: int) -> dict:
        import torch

        return {"attention_mask": attention, "cache_position": torch.arange(start, stop, device=attention.device)}

    def step(self, token, attention, position, step: int):
        return super().step(token, attention, position, step).clone()  # a replayed graph's output is overwritten


def decoding(model, keyword: str, width: int, steps: int, static: bool | None, in_step):
    """The decode loop's cache: `static` True, allocated whole (its step compiled on CUDA, for a model transformers
    compiles whole), else growing. The growing one stays the default until the device tier has timed the static
    one against it (tests/gpu: a compiled step recompiles for every new batch shape); ranks in step keep it."""
    device = next(model.parameters()).device
    if static and in_step is None:
        compiled = device.type == "cuda" and getattr(model, "_can_compile_fullgraph", False)
        return StaticDecoding(model, keyword, width, steps, compiled)
    return DynamicDecoding(model, keyword, width, steps)


def _next_token(logits, sampling: Sampling, generator):
    logits = logits.float()
    return sample_top_p(logits, sampling.temperature, sampling.top_p, generator) if generator is not None \
        else logits.argmax(-1)


def _to_host(tensor) -> np.ndarray:
    """A read back to the host (the only kind a decode loop waits on): a copy, on every device alike."""
    return tensor.to("cpu", copy=True).numpy()


def generate_torch(model, tokenizer, contexts: list[np.ndarray], limits: np.ndarray, sampling: Sampling = Sampling(),
                   seed: int = 0, token_budget: int = 8192, in_step: InStep | None = None,
                   inference: bool = True, static: bool | None = None) -> Answers:
    """Each context's continuation (up to its budget in `limits`). Batches are sized by the key-value cache
    they will hold at their last step (`cache_budget`); prompts are read in chunks of `token_budget` padded
    tokens. The decode loop keeps its state on the device (tokens written into one buffer, positions counted
    up, the attention mask allocated whole) and reads back to the host once every `CHECK_EVERY` steps:
    whether every row is done, and the rows' new tokens for their stop strings (a row found stopped late is
    cut where its stop string was completed; the steps it ran past it change nothing of the others). `in_step`:
    the ranks of a sharded model, generating the same contexts together (`InStep`). `inference`: under
    `inference_mode` (False: `no_grad`, for weights that train on afterwards, as the forgetting monitor's). `static`:
    the decode loop's cache allocated whole (`decoding`)."""
    import logging

    import torch

    from .models import cache_keyword
    from .data.batches import length_batches

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
    budget, why = cache_budget(model, token_budget)
    if in_step is not None:
        budget = in_step.least(budget)
    batches = length_batches(lengths + limits, budget, 1.0)
    if len(contexts):
        logging.getLogger(__name__).info("generation: %d answers in %d batches of up to %d rows; key-value cache "
                                         "budget %s", len(contexts), len(batches), max(len(b) for b in batches), why)
    with torch.inference_mode() if inference else torch.no_grad():
        for batch in batches:
            written, ends = _decode_batch(model, keyword, [contexts[i] for i in batch], limits[batch], pad_id,
                                          eos_id, sampling, generator, watch, max(1, token_budget // len(batch)),
                                          in_step, static)
            for r, i in enumerate(batch):
                tokens[i], ended[i] = written[r], ends[r]
    texts = [until_stop(t, sampling.stop) for t in tokenizer.batch_decode([t.tolist() for t in tokens],
                                                                          skip_special_tokens=True)]
    capped = ~ended & (np.array([len(t) for t in tokens]) >= limits)
    answers = Answers(tokens, texts, capped)
    return answers if in_step is None else in_step.texts(answers)


def _decode_batch(model, keyword, contexts, limits, pad_id, eos_id, sampling, generator, watch, chunk, in_step=None,
                  static=None):
    """One left-padded batch: each row's tokens (EOS left out) and whether EOS or a stop string ended it (with
    `in_step`, the loop runs on until every rank's rows are done: the steps past a row's end change nothing)."""
    import torch

    device = next(model.parameters()).device
    rows, steps = len(contexts), int(limits.max(initial=0))
    lengths = np.array([len(c) for c in contexts], dtype=np.int64)
    width = int(lengths.max())
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.ones((rows, width + steps), dtype=torch.long)  # the prompts' and every step's, whole
    for r, context in enumerate(contexts):
        ids[r, width - lengths[r]:] = torch.from_numpy(np.asarray(context, dtype=np.int64))
        attention[r, :width - lengths[r]] = 0
    ids, attention = ids.to(device), attention.to(device)
    limit = torch.from_numpy(limits).to(device)
    position = torch.from_numpy(lengths).to(device)
    out = torch.full((rows, max(steps, 1)), pad_id, dtype=torch.long, device=device)
    done = limit <= 0
    if steps:
        cache = decoding(model, keyword, width, steps, static, in_step)
        logits = cache.prefill(ids, attention, chunk)
    # the host's view, brought up to date at each read: each row's last step and whether EOS or a stop ended it
    last = limits - 1
    ended = np.zeros(rows, dtype=bool)
    history: list[list[int]] = [[] for _ in range(rows)]  # each row's tokens, for its stop strings
    checked, states, read = 0, [], []  # read: the blocks of tokens the host has read
    for step in range(steps):
        if step:
            logits = cache.step(token, attention, position, step)
            position += 1
        token = _next_token(logits, sampling, generator).masked_fill_(done, pad_id)
        if generator is not None:  # the state after each step's draws (a host copy: no wait on the device)
            states.append(generator.get_state())
        out[:, step] = token
        if eos_id is not None:
            done |= token == eos_id
        done |= limit <= step + 1
        if (step + 1) % CHECK_EVERY and step + 1 < steps:
            continue
        block = _to_host(out[:, checked:step + 1])
        read.append(block)
        stopped = _ends(block, checked, eos_id, watch, history, last, ended)
        if stopped:
            done[torch.tensor(stopped, device=device)] = True
        finished = bool((last <= step).all())
        if in_step is not None:
            finished = in_step.all_done(finished)
        if finished:
            if generator is not None:  # the draws of the steps past the last row's end, taken back
                generator.set_state(states[max(int(last.max()), checked) - checked])
            break
        checked, states = step + 1, []
    host = np.concatenate(read, axis=1) if read else np.zeros((rows, 0), dtype=np.int64)
    written = [host[r, :last[r] + 1 - (ended[r] and host[r, last[r]] == eos_id)].astype(np.int64)
               for r in range(rows)]
    return written, ended


def _ends(block, start, eos_id, watch, history, last, ended) -> list[int]:
    """Reads the tokens of the steps from `start` on (`block`) as they were written, row by row: a row that
    writes EOS ends there (its EOS not kept: `ended`, `last` its step); with stop strings, a row whose text
    completes one ends at that token (kept). The rows a stop string ended, which the device does not know."""
    stopped = []
    for offset in range(block.shape[1]):
        step, live = start + offset, []
        for r in np.flatnonzero(~ended & (last >= step)):
            if eos_id is not None and block[r, offset] == eos_id:
                last[r], ended[r] = step, True
            elif watch is not None:
                history[r].append(int(block[r, offset]))
                live.append(int(r))
        for r in watch.stopped(history, live) if live else []:
            last[r], ended[r] = step, True
            stopped.append(r)
    return stopped


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
