"""Per-example gradients of the base model, randomly projected (paper §4.2).

Each example's gradient of its training loss (mean NLL over its target span: the response for task
examples, every token but the first for lm upstream examples) with respect to all parameters is
projected to `dim` numbers by a count sketch: element i of parameter k goes to bucket h_k(i) with sign
s_k(i). E[<Pg, Pg'>] = <g, g'>, as with the reference's dense Rademacher projection (TRAK), but no
parameters x dim matrix exists. h_k and s_k are hash functions ((a x + b) mod p, p = 2^31 - 1, pairwise
independent, their coefficients drawn once from the seed) computed on the device a slice at a time, kept as one
int32 code per element up to KEPT_BYTES (a model of up to 268M parameters hashes each element once per job), and
each parameter's gradient is projected and freed as soon as the backward pass has written it. A job holds the
weights, the codes, one example's activations and one parameter's gradient, never the whole gradient.

Where the gradients of several examples fit in `GRADIENT_BYTES` (a small model: the demo's, the tests'), examples
of similar lengths are differentiated together (`torch.func`: vmap of grad over the batch, each right-padded, so no
example's tokens see a pad), and their projections added a parameter at a time over the batch: the same gradients
(to float32 rounding) at a fraction of the per-example calls (`together`). A task's mean projected gradient
(`mean_projection`) needs no per-example gradient at all: the projection is linear, so it is the projection of the
gradient of the examples' mean loss, one backward per batch.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from .data.chat import Encoded

log = logging.getLogger(__name__)
PRIME = 2**31 - 1  # the hashes' modulus: a parameter's element index is hashed modulo it
SLICE = 2**24  # elements hashed at once (a bounded transient, whatever the parameter's size)
KEPT_BYTES = 2**30  # the codes kept between examples (4 bytes an element): a model of up to 268M parameters hashes
# each element once per job (135M: 540 MB; hashing them again for each example cost 4-5 s of its 6-7 on 2 cores)
CHUNK = 2**16  # elements summed per bucket in float32 on a CPU (about 64 per bucket at dim 1,024) before float64
GRADIENT_BYTES = 2**26  # per-example gradients held at once (float32): more than one example only for a model of
# fewer than 8.4M parameters, whose batch's memory is small beside any job's (forgetmap.memory.gradient_need)
BATCH_TOKENS = 2048  # padded tokens differentiated at once
PROGRESS_SECONDS = 30  # the log says how far one-at-a-time gradients have come at most this often


class CountSketch:
    """The projection of every trainable parameter of `model` to `dim` numbers (float64 on its device).

    Each element's bucket and sign are one int32 code, bucket + dim for a negative sign: a gradient is summed into
    2 x dim slots by one index_add and the projection is the first half minus the second, no sign multiplied."""

    def __init__(self, model, dim: int, seed: int = 0):
        self.dim = dim
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:
            if p.numel() > PRIME:
                raise ValueError(f"a parameter of {p.numel()} elements is more than the count sketch hashes ({PRIME})")
        # per parameter: (a, b) of its bucket hash and (c, d) of its sign hash, a and c nonzero
        draws = np.random.default_rng([seed, dim]).integers(0, PRIME, size=(len(self.params), 4), dtype=np.int64)
        draws[:, [0, 2]] = np.maximum(draws[:, [0, 2]], 1)
        self.coefficients = [tuple(int(x) for x in row) for row in draws]
        # the parameters, first to last, whose codes fit in KEPT_BYTES: kept once computed
        sizes = np.cumsum([p.numel() for p in self.params])
        self.kept = {k for k, total in enumerate(sizes) if 4 * total <= KEPT_BYTES}
        self._codes: dict[int, torch.Tensor] = {}

    def codes(self, k: int, start: int, stop: int, device) -> torch.Tensor:
        """The int32 codes (bucket, plus dim where the sign is negative) of elements start..stop-1 of parameter k."""
        if k in self.kept:
            if k not in self._codes:
                size = self.params[k].numel()
                self._codes[k] = torch.cat([self._hash(k, i, min(i + SLICE, size), device)
                                            for i in range(0, size, SLICE)])
            return self._codes[k][start:stop]
        return self._hash(k, start, stop, device)

    def hashes(self, k: int, start: int, stop: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Bucket (int64) and sign (float64, +-1) of elements start..stop-1 of parameter k, read from their codes."""
        code = self.codes(k, start, stop, device).long()
        return code % self.dim, (code >= self.dim).double().mul_(-2).add_(1)

    def _hash(self, k: int, start: int, stop: int, device) -> torch.Tensor:
        a, b, c, d = self.coefficients[k]
        i = torch.arange(start, stop, dtype=torch.int64, device=device)
        bucket = (i * a + b) % PRIME % self.dim  # a x < 2^62: no int64 overflow
        return bucket.add_((i.mul_(c).add_(d) % PRIME % 2) * self.dim).to(torch.int32)

    def add(self, out: torch.Tensor, k: int, grad: torch.Tensor) -> None:
        """out += the projection of parameter k's gradient `grad`; with `out` (B, dim) and `grad` (B, ...), each
        row's. A CPU sums CHUNK elements at a time in float32 (the float64 sums it adds them to differ from summing
        all in float64 by float32 rounding of about 64 terms); a GPU sums a slice at a time in float64."""
        rows = out.dim() == 2
        flat = grad.reshape(len(grad), -1) if rows else grad.reshape(-1)
        size = flat.shape[-1]
        step, dtype = (SLICE, torch.float64) if flat.is_cuda else (CHUNK, torch.float32)
        slots = torch.zeros(*out.shape[:-1], 2 * self.dim, dtype=dtype, device=out.device)
        for start in range(0, size, step):
            stop = min(start + step, size)
            slots.index_add_(int(rows), self.codes(k, start, stop, flat.device), flat[..., start:stop].to(dtype))
            out += slots[..., :self.dim].double() - slots[..., self.dim:].double()
            slots.zero_()


@contextmanager
def projecting(sketch: CountSketch, out: torch.Tensor):
    """While open, each parameter's gradient is added to `out`'s projection once a backward pass has written it,
    and freed: no whole gradient is ever held."""
    index = {id(p): k for k, p in enumerate(sketch.params)}

    def project(p):
        sketch.add(out, index[id(p)], p.grad)
        p.grad = None

    hooks = [p.register_post_accumulate_grad_hook(project) for p in sketch.params]
    try:
        yield out
    finally:
        for hook in hooks:
            hook.remove()


def example_projection(model, sketch: CountSketch, ids: torch.Tensor, target_start: int) -> torch.Tensor:
    """One example's projected gradient (float64, on the model's device): each parameter's gradient is added
    to the projection once the backward pass has written it, and freed (`projecting`)."""
    with projecting(sketch, torch.zeros(sketch.dim, dtype=torch.float64, device=ids.device)) as out:
        logits = model(input_ids=ids, use_cache=False).logits[0, target_start - 1:-1].float()
        F.cross_entropy(logits, ids[0, target_start:]).backward()
    return out


def together(parameters: int, longest: int) -> int:
    """How many examples of up to `longest` tokens a model of `parameters` differentiates at once: as many as
    GRADIENT_BYTES holds of their float32 gradients and BATCH_TOKENS of their tokens where that is two or more, else
    one (a large model: one example's activations and one parameter's gradient at a time)."""
    room = GRADIENT_BYTES // (4 * max(1, parameters))
    return 1 if room < 2 else max(1, min(room, BATCH_TOKENS // max(1, longest)))


def batches(examples: list[Encoded], per_batch) -> list[list[int]]:
    """Positions of the examples with a target, by length, cut into batches of at most `per_batch(longest)`."""
    order = sorted((i for i, e in enumerate(examples) if len(e.ids) > e.target_start), key=lambda i: len(examples[i].ids))
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < per_batch(len(examples[i].ids)):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def padded(examples: list[Encoded], batch: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, T) right-padded with token 0, weights (B, T - 1): 1 / the example's target count at each position
    whose next token is a target, 0 elsewhere): each example's mean NLL over its target span is Σ weights · NLL."""
    longest = max(len(examples[i].ids) for i in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    weights = torch.zeros(len(batch), longest - 1, dtype=torch.float32)
    for row, i in enumerate(batch):
        e = examples[i]
        ids[row, :len(e.ids)] = torch.from_numpy(e.ids)
        weights[row, e.target_start - 1:len(e.ids) - 1] = 1.0 / (len(e.ids) - e.target_start)
    return ids.to(device), weights.to(device)


def _weighted_nll(model, ids: torch.Tensor, weights: torch.Tensor, params=None) -> torch.Tensor:
    """Σ weights · NLL of each next token (causal: a right pad never reaches an earlier token's logits)."""
    if params is None:
        logits = model(input_ids=ids, use_cache=False).logits
    else:
        from torch.func import functional_call

        logits = functional_call(model, params, (ids,), {"use_cache": False}).logits
    nll = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                          reduction="none")
    return (nll * weights.reshape(-1)).sum()


def projected_gradients(model, examples: list[Encoded], dim: int, seed: int = 0) -> np.ndarray:
    """(len(examples), dim) projected per-example gradients; zero rows for examples with no target. Several
    examples at once where their gradients fit in GRADIENT_BYTES; one at a time otherwise."""
    sketch = CountSketch(model, dim, seed)
    device = next(model.parameters()).device
    out = np.zeros((len(examples), dim), dtype=np.float32)
    model.eval()  # no dropout: the gradient of the model as it is
    model.zero_grad(set_to_none=True)
    parameters = sum(p.numel() for p in sketch.params)
    if together(parameters, 1) >= 2:
        try:
            for batch in batches(examples, lambda longest: together(parameters, longest)):
                out[batch] = _batch_projections(model, sketch, *padded(examples, batch, device)).float().cpu().numpy()
            return out
        except (RuntimeError, NotImplementedError) as exc:  # an architecture functorch cannot batch
            log.info("per-example gradients one at a time: %s cannot be differentiated per example in a batch (%s)",
                     type(model).__name__, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            out[:] = 0
    wanted = [i for i, e in enumerate(examples) if len(e.ids) > e.target_start]
    log.info("per-example gradients of %d examples one at a time (%s, %.0fM parameters, %d threads)", len(wanted),
             device, parameters / 1e6, torch.get_num_threads())
    started = said = time.monotonic()
    for done, i in enumerate(wanted, 1):
        e = examples[i]
        ids = torch.from_numpy(e.ids[None]).to(device)
        out[i] = example_projection(model, sketch, ids, e.target_start).float().cpu().numpy()
        if time.monotonic() - said >= PROGRESS_SECONDS or done == len(wanted):
            said = time.monotonic()
            each = (said - started) / done
            log.info("gradients: %d of %d examples, %.2f s each, about %.1f min left", done, len(wanted), each,
                     each * (len(wanted) - done) / 60)
    return out


def _batch_projections(model, sketch: CountSketch, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(B, dim): each row's projected gradient, the batch differentiated at once (vmap of grad), through eager
    attention (functorch has no batching rule for the fused CPU kernel)."""
    from torch.func import grad, vmap

    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def loss(values, row_ids, row_weights):
        return _weighted_nll(model, row_ids[None], row_weights[None], values)

    attention = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, ids, weights)
    finally:
        model.set_attn_implementation(attention)
    out = torch.zeros(len(ids), sketch.dim, dtype=torch.float64, device=ids.device)
    for k, name in enumerate(names):
        sketch.add(out, k, grads.pop(name))
    return out


def mean_projection(model, examples: list[Encoded], dim: int, seed: int = 0, room: int | None = None) -> np.ndarray:
    """(dim,) the mean over `examples` of their projected gradients (an example with no target counts as 0): the
    projection of the gradient of their mean loss, a backward per batch, each parameter's gradient projected as it
    is written and freed. No per-example gradient is held, so a large model's batches are bounded by activations
    alone: as many examples as fill `room` tokens, padding included (the job's max_length: the memory one example at
    max_length takes, forgetmap.memory.gradient_need, holds them, attention's included, as B·L ≤ room; default the
    longest example's). At 135M one at a time took 7.5 of the job's 18.6 minutes, and batches within the longest
    example's tokens, where a task's examples are of one length, were one at a time again (5.5 of 12.5)."""
    sketch = CountSketch(model, dim, seed)
    device = next(model.parameters()).device
    model.eval()
    model.zero_grad(set_to_none=True)
    parameters = sum(p.numel() for p in sketch.params)
    room = max([len(e.ids) for e in examples] + [room or 1])
    with projecting(sketch, torch.zeros(dim, dtype=torch.float64, device=device)) as out:
        for batch in batches(examples, lambda longest: max(together(parameters, longest), room // max(1, longest))):
            ids, weights = padded(examples, batch, device)
            (_weighted_nll(model, ids, weights) / len(examples)).backward()
    return out.float().cpu().numpy()
