"""Per-example gradients of the base model, randomly projected (paper §4.2).

Each example's gradient of its training loss (mean NLL over its target span: the response for task
examples, every token but the first for lm upstream examples) with respect to all parameters is
projected to `dim` numbers by a count sketch: parameter i goes to bucket h(i) with sign s(i), both
drawn once from a seeded generator. E[<Pg, Pg'>] = <g, g'>, as with the reference's dense
Rademacher projection (TRAK), but the projection costs O(parameters) per example and no
parameters x dim matrix is ever stored.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .data.chat import Encoded


class CountSketch:
    def __init__(self, model, dim: int, seed: int = 0):
        self.dim = dim
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buckets, self.signs = [], []
        for k, p in enumerate(self.params):
            g = torch.Generator().manual_seed(seed * 1_000_003 + k)
            self.buckets.append(torch.randint(0, dim, (p.numel(),), generator=g).to(p.device))
            self.signs.append((torch.randint(0, 2, (p.numel(),), generator=g) * 2 - 1).to(p.device, p.dtype))

    def project(self) -> torch.Tensor:
        out = torch.zeros(self.dim, dtype=torch.float64, device=self.params[0].device)
        for p, bucket, sign in zip(self.params, self.buckets, self.signs):
            if p.grad is not None:
                out.index_add_(0, bucket, (p.grad.reshape(-1) * sign).double())
        return out


def projected_gradients(model, examples: list[Encoded], dim: int, seed: int = 0) -> np.ndarray:
    """(len(examples), dim) projected per-example gradients; zero rows for examples with no target."""
    sketch = CountSketch(model, dim, seed)
    device = next(model.parameters()).device
    out = np.zeros((len(examples), dim), dtype=np.float32)
    model.eval()  # no dropout: the gradient of the model as it is
    for i, e in enumerate(examples):
        if len(e.ids) - e.target_start <= 0:
            continue
        model.zero_grad(set_to_none=True)
        ids = torch.from_numpy(e.ids[None]).to(device)
        logits = model(input_ids=ids).logits[0, e.target_start - 1:-1].float()
        F.cross_entropy(logits, ids[0, e.target_start:]).backward()
        out[i] = sketch.project().float().cpu().numpy()
    model.zero_grad(set_to_none=True)
    return out
