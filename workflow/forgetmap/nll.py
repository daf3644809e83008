"""Per-example NLL: mean of -log p(x_t | x_<t) over each example's scored span (the primitive every
stage that scores uses: the score command, correctness, mitigation, the demo's pretraining log).

Backends write the same contract (`example_id`, `nll` float32, `n_tokens` int32):
- `torch` (default, CPU and GPU): examples sorted by length and packed into batches under a token
  budget; the transformer body runs once per batch and only the scored positions go through the
  output head, in chunks, so the full-vocabulary logits of a whole batch never exist at once.
- `vllm` (optional GPU extra): `prompt_logprobs=0` on the same token ids, as the paper scores.
NaN appears only where an example's span is empty, and is counted in the log.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .data.batches import length_batches, pad
from .data.chat import Encoded
from .models import is_flash
from .data.packing import Layout, packed_batches

HEAD_CHUNK_ELEMENTS = 2**26  # scored positions x vocab per output-head chunk (256 MB of fp32 logits)
HEAD_CHECK_TOKENS = 16  # the prefix `head_reproduces_logits` compares on (a scaled or capped head shows on any)


def _span_positions(encoded: list[Encoded]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(member, position predicting the target, target position) for every scored token of a batch, positions
    within each member's own ids."""
    counts = np.array([e.n_scored for e in encoded])
    rows = np.repeat(np.arange(len(encoded)), counts)
    starts = np.repeat(np.array([e.target_start for e in encoded]), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    targets = starts + offsets
    return rows, targets - 1, targets


def _token_nll_from_hidden(hidden: torch.Tensor, head, targets: torch.Tensor,
                           argmax: list | None = None) -> torch.Tensor:
    """-log p(target) for rows of hidden states, through the output head in bounded chunks; with a
    list `argmax`, whether each target is the argmax is appended to it (one bool tensor)."""
    vocab = getattr(head, "out_features", None) or head.weight.shape[0]  # ZeRO-3 empties a partitioned weight
    chunk = max(1, HEAD_CHUNK_ELEMENTS // vocab)
    out, hits = [], []
    for s in range(0, hidden.shape[0], chunk):
        logits = head(hidden[s:s + chunk]).float()
        out.append(F.cross_entropy(logits, targets[s:s + chunk], reduction="none"))
        if argmax is not None:
            hits.append(logits.argmax(-1) == targets[s:s + chunk])
    if argmax is not None:
        argmax.append(torch.cat(hits) if hits else targets.new_zeros(0, dtype=torch.bool))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


def transformer_body(model):
    """The transformer without its output head. A peft model's `base_model` is the LoRA wrapper, not the
    body: the body is that of the model it wraps, whose layers carry the adapters in place."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.base_model


@torch.no_grad()
def head_check_logits(model, ids, gathered=nullcontext) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's logits on `ids` and those of its transformer body through the output head alone
    (`gathered`: the context in which body and head can be called apart from the model, TorchScorer's)."""
    device = next(model.parameters()).device
    ids = (torch.from_numpy(ids) if isinstance(ids, np.ndarray) else ids).reshape(1, -1).to(device)
    logits = model(input_ids=ids, use_cache=False).logits[0]
    with gathered():
        hidden = transformer_body(model)(input_ids=ids, use_cache=False).last_hidden_state[0]
        return logits, model.get_output_embeddings()(hidden)


def head_reproduces_logits(model, ids, gathered=nullcontext) -> bool:
    """Do the transformer body and the output head alone give the model's logits on `ids`? (False for a
    model whose forward scales or caps its logits: then only the full forward is right.)"""
    logits, via_head = head_check_logits(model, ids, gathered)
    tol = 1e-4 if logits.dtype == torch.float32 and via_head.dtype == torch.float32 else 5e-2  # half precision
    return bool(torch.allclose(logits.float(), via_head.float(), atol=tol, rtol=tol))


class TorchScorer:
    """Scores encoded examples with a causal LM already on its device.

    `gathered`: a context inside which the transformer body and the output head can be called apart from the
    model (the root's weights of a sharded model gathered: forgetmap.meter); `inference`: False scores under
    `no_grad` rather than `inference_mode`, for weights that train on afterwards (a sharded model's gathered
    buffers must not become inference tensors)."""

    def __init__(self, model, pad_id: int, token_budget: int = 16384, max_padding: float | None = None,
                 gathered=nullcontext, inference: bool = True, packing: bool = False):
        self.model = model
        self.packing = packing  # examples packed into rows without attention across them (forgetmap.data.packing)
        self.flat = packing and is_flash(model)  # flash-attention keeps packed examples apart in one row only
        self.gathered = gathered
        self.grad_off = torch.inference_mode if inference else torch.no_grad
        self.pad_id = pad_id
        self.token_budget = token_budget
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        # CPU: pad-free batches of equal length run attention's causal fast path, no mask (~1.2x);
        # GPU: fuller batches matter more than a little padding
        self.max_padding = (0.0 if self.device.type == "cpu" else 0.1) if max_padding is None else max_padding
        self.head = model.get_output_embeddings()
        self.body = transformer_body(model)
        self.use_hidden = None  # decided on the first batch: does body + head reproduce the logits?

    def token_nll(self, ids: torch.Tensor, rows: torch.Tensor, predict_at: torch.Tensor, targets: torch.Tensor,
                  attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                  argmax: list | None = None, parts: tuple[int, ...] = ()) -> torch.Tensor:
        """-log p(targets) at (rows, predict_at) of one forward pass over `ids` (float32, one per target);
        with a list `argmax`, whether each target is the model's argmax is appended to it. `parts`: the
        boundaries of target groups that go through the output head separately (a group's NLL then does
        not depend on the others' presence)."""
        if self.use_hidden is None:  # a short prefix: its full-vocabulary logits are a few MB at any length
            self.use_hidden = head_reproduces_logits(self.model, ids[0, :HEAD_CHECK_TOKENS], self.gathered)
        bounds = [0, *parts, len(targets)]
        groups = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
        hits = [] if argmax is not None else None
        if self.use_hidden:
            # no key-value cache: without gradients it would keep every layer's keys and values to the end
            with self.gathered():
                hidden = self.body(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
                                   use_cache=False).last_hidden_state
                out = [_token_nll_from_hidden(hidden[rows[g], predict_at[g]], self.head, targets[g], hits)
                       for g in groups]
        else:
            logits = self.model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
                                use_cache=False).logits
            out = []
            for g in groups:
                chosen = logits[rows[g], predict_at[g]].float()
                out.append(F.cross_entropy(chosen, targets[g], reduction="none"))
                if hits is not None:
                    hits.append(chosen.argmax(-1) == targets[g])
        if argmax is not None:
            argmax.append(torch.cat(hits))
        return out[0] if len(out) == 1 else torch.cat(out)

    def plan(self, encoded: list[Encoded]) -> list[np.ndarray]:
        """The length batches `encoded` is scored in: indices, longest first, within the token budget (packed: rows
        as wide as the longest example, filled best fit: forgetmap.data.packing)."""
        lengths = np.array([len(e.ids) for e in encoded])
        if self.packing:
            return packed_batches(lengths, self.token_budget)
        return length_batches(lengths, self.token_budget, self.max_padding)

    def _tensors(self, members: list[Encoded], width: int):
        """A batch's model inputs (ids, attention mask, position ids) and where each member's tokens start:
        (row, column) per member; packed, in rows of `width`."""
        if self.packing:
            layout = Layout(members, self.pad_id, width, flat=self.flat)
            return layout.ids.to(self.device), None, layout.position_ids.to(self.device), layout.row, layout.offset
        ids, mask = pad(members, self.pad_id)
        # a batch of equal lengths needs no mask: attention takes its causal fast path
        mask = None if bool(mask.all()) else mask.to(self.device)
        return ids.to(self.device), mask, None, np.arange(len(members)), np.zeros(len(members), dtype=np.int64)

    def _token_nll(self, encoded: list[Encoded], argmax: list | None = None, batches: list | None = None):
        """For each length batch (`batches`, or this scorer's plan): (its example indices, the row of each
        scored token, the tokens' NLL). With a list `argmax`, (rows, hits) is appended to it per batch:
        whether each scored token, and the token right after each span, is the model's argmax (its NLL is
        not part of the span's)."""
        batches = self.plan(encoded) if batches is None else batches
        # packed rows are as wide as the longest example run (packing.packed_batches)
        width = max((len(encoded[i].ids) for batch in batches for i in batch), default=1)
        for batch in batches:
            members = [encoded[i] for i in batch]
            rows, pred_pos, target_pos = _span_positions(members)
            if len(rows) == 0:
                continue
            ids, mask, positions, row_of, column = self._tensors(members, width)
            n_span = len(rows)
            if argmax is not None:  # the token after each span: does the model stop (EOS) where the span does?
                after = np.array([j for j, e in enumerate(members) if e.n_scored and e.score_end < len(e.ids)],
                                 dtype=np.int64)
                ends = np.array([members[j].score_end for j in after], dtype=np.int64)
                rows, pred_pos, target_pos = (np.r_[rows, after], np.r_[pred_pos, ends - 1], np.r_[target_pos, ends])
            rows_t = torch.from_numpy(rows).to(self.device)
            at_row = torch.from_numpy(row_of[rows]).to(self.device)
            targets = ids[at_row, torch.from_numpy(target_pos + column[rows]).to(self.device)]
            pred_t = torch.from_numpy(pred_pos + column[rows]).to(self.device)
            hits = [] if argmax is not None else None
            token_nll = self.token_nll(ids, at_row, pred_t, targets, attention_mask=mask, position_ids=positions,
                                       argmax=hits, parts=(n_span,) if argmax is not None else ())
            if argmax is not None:
                argmax.append((rows_t, hits[0]))
            yield batch, rows_t[:n_span], token_nll[:n_span]

    def _sums(self, encoded: list[Encoded], greedy: bool,
              batches: list | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Summed NLL per example (float64; 0 where the span is empty) and, with `greedy`, whether every
        token of its scored span and the token after it are the model's argmax (the span, then that
        token, is what greedy decoding from the span's prefix writes)."""
        sums = np.zeros(len(encoded), dtype=np.float64)
        misses = np.zeros(len(encoded), dtype=np.int64) if greedy else None
        argmax = [] if greedy else None
        for batch, rows_t, token_nll in self._token_nll(encoded, argmax, batches):
            per_row = torch.zeros(len(batch), dtype=torch.float64, device=self.device)
            per_row.index_add_(0, rows_t, token_nll.double())
            sums[batch] = per_row.cpu().numpy()
            if greedy:
                hit_rows, hits = argmax.pop()
                missed = torch.zeros(len(batch), dtype=torch.long, device=self.device)
                missed.index_add_(0, hit_rows, (~hits).long())
                misses[batch] = missed.cpu().numpy()
        return sums, None if misses is None else misses == 0

    def sum_nll(self, encoded: list[Encoded]) -> np.ndarray:
        """Summed NLL over each example's scored span (float64; 0 where the span is empty)."""
        with self.grad_off():
            return self._sums(encoded, False)[0]

    def score(self, encoded: list[Encoded], batches: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Mean NLL over each example's scored span (NaN where empty), and the span lengths. `batches`: the
        batches to run, in order (indices into `encoded`; default this scorer's `plan`): an example in none of
        them is NaN, one in several is the last's."""
        nll, n_tokens, _ = self._score(encoded, greedy=False, batches=batches)
        return nll, n_tokens

    def sums(self, encoded: list[Encoded], batches: list | None = None) -> np.ndarray:
        """Summed NLL over each example's scored span, float64 (as `score`: NaN where an example is in none of
        `batches`, or its span is empty)."""
        with self.grad_off():
            sums, _ = self._sums(encoded, False, batches)
        n_tokens = np.array([e.n_scored for e in encoded])
        return np.where(_in_batches(len(encoded), batches) & (n_tokens > 0), sums, np.nan)

    def score_greedy(self, encoded: list[Encoded]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `score`, and whether each span and the token after it are the greedy continuation (_sums)."""
        return self._score(encoded, greedy=True)

    def _score(self, encoded: list[Encoded], greedy: bool, batches: list | None = None):
        n_tokens = np.array([e.n_scored for e in encoded], dtype=np.int32)
        with self.grad_off():
            sums, is_greedy = self._sums(encoded, greedy, batches)
        if batches is not None:  # only the examples of the batches run are scored
            n_tokens = np.where(_in_batches(len(encoded), batches), n_tokens, 0).astype(np.int32)
        with np.errstate(invalid="ignore", divide="ignore"):
            nll = np.where(n_tokens > 0, sums / np.maximum(n_tokens, 1), np.nan).astype(np.float32)
        return nll, n_tokens, is_greedy

    def score_tokens(self, encoded: list[Encoded]) -> list[np.ndarray]:
        """Each example's per-token NLL over its scored span [target_start, score_end), float32."""
        with self.grad_off():
            return self._score_tokens(encoded)

    def _score_tokens(self, encoded: list[Encoded]) -> list[np.ndarray]:
        out: list[np.ndarray] = [np.zeros(0, dtype=np.float32) for _ in encoded]
        for batch, rows_t, token_nll in self._token_nll(encoded):
            values = token_nll.float().cpu().numpy()
            bounds = np.cumsum([0] + [encoded[i].n_scored for i in batch])
            for j, i in enumerate(batch):
                out[i] = values[bounds[j]:bounds[j + 1]]
        return out


def _in_batches(n: int, batches: list | None) -> np.ndarray:
    """Which of n examples the batches run (all where `batches` is None: the scorer's plan covers every one)."""
    if batches is None:
        return np.ones(n, dtype=bool)
    run = np.zeros(n, dtype=bool)
    for batch in batches:
        run[batch] = True
    return run


@torch.inference_mode()
def score_naive(model, encoded: list[Encoded]) -> np.ndarray:
    """The reference: one example at a time, full logits, log-softmax, gather. Slow; for checks."""
    device = next(model.parameters()).device
    out = np.full(len(encoded), np.nan, dtype=np.float32)
    for i, e in enumerate(encoded):
        if e.n_scored == 0:
            continue
        ids = torch.from_numpy(e.ids[None]).to(device)
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        t = torch.arange(e.target_start, e.score_end, device=device)
        out[i] = float(-logp[t - 1, ids[0, t]].mean())
    return out


def nll_from_prompt_logprobs(ids: list[int], prompt_logprobs, target_start: int, score_end: int) -> float:
    """Mean NLL over [target_start, score_end) from vLLM's `prompt_logprobs` (position 0 has none).

    Two structures, as vLLM returns them: a list whose entry t >= 1 maps token ids to objects with a
    `logprob` attribute (or plain floats), or, with `flat_logprobs=True`, a FlatLogprobs whose columns
    `start_indices`, `end_indices`, `token_ids`, `logprobs` hold every position's entries flat (no Python
    object per token: read with numpy). The actual prompt token ids[t] is always among position t's."""
    if score_end <= target_start:
        return float("nan")
    if hasattr(prompt_logprobs, "start_indices"):
        starts = np.asarray(prompt_logprobs.start_indices[target_start:score_end], dtype=np.int64)
        ends = np.asarray(prompt_logprobs.end_indices[target_start:score_end], dtype=np.int64)
        tokens = np.asarray(prompt_logprobs.token_ids, dtype=np.int64)
        values = np.asarray(prompt_logprobs.logprobs, dtype=np.float64)
        wanted = np.asarray(ids[target_start:score_end], dtype=np.int64)
        counts = ends - starts
        position = np.repeat(np.arange(len(starts)), counts)
        entries = np.repeat(starts, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        hit = tokens[entries] == wanted[position]
        found, first = np.unique(position[hit], return_index=True)  # each position's first matching entry
        if len(found) != len(starts):
            raise ValueError("a prompt token is missing from vLLM's prompt log-probs")
        return float(-values[entries[hit][first]].mean())
    total = 0.0
    for t in range(target_start, score_end):
        entry = prompt_logprobs[t][ids[t]]
        total -= float(getattr(entry, "logprob", entry))
    return total / (score_end - target_start)


def model_positions(model_dir: str) -> int | None:
    """The context length a checkpoint (or the base its pointer or adapter names) was built for."""
    import json

    from .models import read_pointer

    directory = Path(model_dir)
    for _ in range(3):  # adapter -> base pointer -> its files
        if (directory / "config.json").exists():
            break
        pointer = read_pointer(directory)
        if pointer is None:
            return None
        directory = Path(pointer.get("local") or pointer["path"])
    if not (directory / "config.json").exists():
        return None
    return positions_of(json.loads((directory / "config.json").read_text()))


def positions_of(config: dict) -> int | None:
    """The context length a model's configuration (its `config.json`, as a dict) states, or None."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def prompt_logprob_params():  # pragma: no cover - needs the gpu extra
    """Prompt log-probs only: no detokenisation, flat columns instead of a Python object per token."""
    from vllm import SamplingParams

    try:
        return SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, flat_logprobs=True)
    except TypeError:  # a vLLM before FlatLogprobs: the list form, parsed alike
        return SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)


def score_with_vllm(llm, encoded: list[Encoded]) -> np.ndarray:  # pragma: no cover - needs the gpu extra
    """Score through vLLM: `prompt_logprobs=0` on the same token ids, as the paper scores."""
    from vllm.inputs import TokensPrompt

    return score_prompts(llm, encoded, TokensPrompt, prompt_logprob_params())


def score_prompts(llm, encoded: list[Encoded], make_prompt, params) -> np.ndarray:
    """Each example's NLL from an engine's prompt log-probs. An example with no token to score (an empty
    text) is not sent, since vLLM refuses an empty prompt: its NLL is NaN, as the torch backend gives."""
    nll = np.full(len(encoded), np.nan, dtype=np.float32)
    sent = [i for i, e in enumerate(encoded) if e.n_scored > 0]
    if not sent:
        return nll
    outputs = llm.generate([make_prompt(prompt_token_ids=encoded[i].ids.tolist()) for i in sent], params)
    for i, output in zip(sent, outputs):
        e = encoded[i]
        nll[i] = nll_from_prompt_logprobs(e.ids.tolist(), output.prompt_logprobs, e.target_start, e.score_end)
    return nll
