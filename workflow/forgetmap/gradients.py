"""Per-example gradients of the base model, randomly projected (paper §4.2).

Each example's gradient of its training loss (mean NLL over its target span: the response for task
examples, every token but the first for lm upstream examples) with respect to all parameters is
projected to `dim` numbers by a count sketch: element i of parameter k goes to bucket h_k(i) with sign
s_k(i). E[<Pg, Pg'>] = <g, g'>, as with the reference's dense Rademacher projection (TRAK), but no
parameters x dim matrix exists. Nothing per parameter is stored either: h_k and s_k are hash functions
((a x + b) mod p, p = 2^31 - 1, pairwise independent, their coefficients drawn once from the seed) computed
on the device a slice at a time, and each parameter's gradient is projected and freed as soon as the
backward pass has written it. A job holds the weights, one example's activations and one parameter's
gradient, not the 12 bytes per parameter a stored sketch and the whole gradient would add (7B: 160 GiB).

Where the gradients of several examples fit in `GRADIENT_BYTES` (a small model: the demo's, the tests'), examples
of similar lengths are differentiated together (`torch.func`: vmap of grad over the batch, each right-padded, so no
example's tokens see a pad), and their projections added a parameter at a time over the batch: the same gradients
(to float32 rounding) at a fraction of the per-example calls (`together`). A task's mean projected gradient
(`mean_projection`) needs no per-example gradient at all: the projection is linear, so it is the projection of the
gradient of the examples' mean loss, one backward per batch.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from .data.chat import Encoded

log = logging.getLogger(__name__)
PRIME = 2**31 - 1  # the hashes' modulus: a parameter's element index is hashed modulo it
SLICE = 2**24  # elements hashed at once (a bounded transient, whatever the parameter's size)
KEPT = 2**20  # elements whose hashes are kept between examples (16 MiB): a small model (the demo's) hashes nothing twice
GRADIENT_BYTES = 2**26  # per-example gradients held at once (float32): more than one example only for a model of
# fewer than 8.4M parameters, whose batch's memory is small beside any job's (forgetmap.memory.gradient_need)
BATCH_TOKENS = 2048  # padded tokens differentiated at once


class CountSketch:
    """The projection of every trainable parameter of `model` to `dim` numbers (float64 on its device)."""

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
        # the parameters, first to last, whose whole hashes fit in KEPT elements: kept once computed
        sizes = np.cumsum([p.numel() for p in self.params])
        self.kept = {k for k, total in enumerate(sizes) if total <= KEPT}
        self._hashes: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hashes(self, k: int, start: int, stop: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Bucket (int64) and sign (float64, +-1) of elements start..stop-1 of parameter k."""
        if k in self.kept:
            if k not in self._hashes:
                self._hashes[k] = self._hash(k, 0, self.params[k].numel(), device)
            bucket, sign = self._hashes[k]
            return bucket[start:stop], sign[start:stop]
        return self._hash(k, start, stop, device)

    def _hash(self, k: int, start: int, stop: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        a, b, c, d = self.coefficients[k]
        i = torch.arange(start, stop, dtype=torch.int64, device=device)
        bucket = (i * a + b) % PRIME % self.dim  # a x < 2^62: no int64 overflow
        sign = ((i * c + d) % PRIME % 2).to(torch.float64).mul_(-2).add_(1)
        return bucket, sign

    def add(self, out: torch.Tensor, k: int, grad: torch.Tensor) -> None:
        """out += the projection of parameter k's gradient `grad`; with `out` (B, dim) and `grad` (B, ...), each
        row's."""
        rows = out.dim() == 2
        flat = grad.reshape(len(grad), -1) if rows else grad.reshape(-1)
        size = flat.shape[-1]
        for start in range(0, size, SLICE):
            stop = min(start + SLICE, size)
            bucket, sign = self.hashes(k, start, stop, flat.device)
            out.index_add_(int(rows), bucket, flat[..., start:stop].double().mul_(sign))


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
    for i, e in enumerate(examples):
        if len(e.ids) - e.target_start <= 0:
            continue
        ids = torch.from_numpy(e.ids[None]).to(device)
        out[i] = example_projection(model, sketch, ids, e.target_start).float().cpu().numpy()
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


def mean_projection(model, examples: list[Encoded], dim: int, seed: int = 0) -> np.ndarray:
    """(dim,) the mean over `examples` of their projected gradients (an example with no target counts as 0): the
    projection of the gradient of their mean loss, a backward per batch (`together`: one example at a time for a
    large model), each parameter's gradient projected as it is written and freed."""
    sketch = CountSketch(model, dim, seed)
    device = next(model.parameters()).device
    model.eval()
    model.zero_grad(set_to_none=True)
    parameters = sum(p.numel() for p in sketch.params)
    with projecting(sketch, torch.zeros(dim, dtype=torch.float64, device=device)) as out:
        for batch in batches(examples, lambda longest: together(parameters, longest)):
            ids, weights = padded(examples, batch, device)
            (_weighted_nll(model, ids, weights) / len(examples)).backward()
    return out.float().cpu().numpy()
