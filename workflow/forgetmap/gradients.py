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
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .data.chat import Encoded

PRIME = 2**31 - 1  # the hashes' modulus: a parameter's element index is hashed modulo it
SLICE = 2**24  # elements hashed at once (a bounded transient, whatever the parameter's size)
KEPT = 2**20  # elements whose hashes are kept between examples (16 MiB): a small model (the demo's) hashes nothing twice


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
        """out += the projection of parameter k's gradient `grad`."""
        flat = grad.reshape(-1)
        for start in range(0, flat.numel(), SLICE):
            stop = min(start + SLICE, flat.numel())
            bucket, sign = self.hashes(k, start, stop, flat.device)
            out.index_add_(0, bucket, flat[start:stop].double().mul_(sign))


def example_projection(model, sketch: CountSketch, ids: torch.Tensor, target_start: int) -> torch.Tensor:
    """One example's projected gradient (float64, on the model's device): each parameter's gradient is added
    to the projection once the backward pass has written it, and freed."""
    out = torch.zeros(sketch.dim, dtype=torch.float64, device=ids.device)
    index = {id(p): k for k, p in enumerate(sketch.params)}

    def project(p):
        sketch.add(out, index[id(p)], p.grad)
        p.grad = None

    hooks = [p.register_post_accumulate_grad_hook(project) for p in sketch.params]
    try:
        logits = model(input_ids=ids, use_cache=False).logits[0, target_start - 1:-1].float()
        F.cross_entropy(logits, ids[0, target_start:]).backward()
    finally:
        for hook in hooks:
            hook.remove()
    return out


def projected_gradients(model, examples: list[Encoded], dim: int, seed: int = 0) -> np.ndarray:
    """(len(examples), dim) projected per-example gradients; zero rows for examples with no target."""
    sketch = CountSketch(model, dim, seed)
    device = next(model.parameters()).device
    out = np.zeros((len(examples), dim), dtype=np.float32)
    model.eval()  # no dropout: the gradient of the model as it is
    model.zero_grad(set_to_none=True)
    for i, e in enumerate(examples):
        if len(e.ids) - e.target_start <= 0:
            continue
        ids = torch.from_numpy(e.ids[None]).to(device)
        out[i] = example_projection(model, sketch, ids, e.target_start).float().cpu().numpy()
    return out
