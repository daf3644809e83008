"""EMA of the weights, a modifier of any arm: slow weights θ̄ ← d·θ̄ + (1 − d)·θ after every optimizer
step, started at the initial weights, and the fine-tune's result is θ̄ (SuRe's slow weights, arXiv
2511.22367; the fast weights train as the arm says). With decay d over T steps the base keeps weight d^T
in the result: an EMA pulls the fine-tune back toward the base as well as smoothing it.
"""

from __future__ import annotations

import torch

from .hooks import Hook, trainable


class EMA(Hook):
    def __init__(self, decay: float) -> None:
        self.decay = decay

    def start(self, model) -> None:
        self.slow = [(p, p.detach().clone()) for p in trainable(model)]
        self.steps = 0

    @torch.no_grad()
    def after_step(self, model) -> None:
        for p, slow in self.slow:
            slow.lerp_(p.detach(), 1.0 - self.decay)
        self.steps += 1

    @torch.no_grad()
    def finish(self, model) -> dict:
        for p, slow in self.slow:
            p.copy_(slow)
        self.slow = []
        return {"ema_base_weight": round(self.decay ** self.steps, 6)}
