"""Anchor penalties: keep the fine-tune near the base model, in its weights or in what it predicts.

- **L2-SP** (Li et al., ICML 2018): the loss gains λ/2 · ‖θ − θ₀‖² over the trained parameters, θ₀ their
  values before training; its gradient λ(θ − θ₀) is added to the step's gradient before clipping (no
  extra forward pass; under LoRA θ₀ is the adapter's initialisation).
- **KL to the base** on the task's own data: the loss gains β · KL(p_base ‖ p_θ) summed over the kept
  target tokens and normalised like the task loss (the forward KL, as RL's Razor measures a fine-tune's
  distance from its base; Lin et al. compare it with weight averaging). The base's next-token
  distribution comes from a frozen copy of the initial model (full fine-tuning: a second copy of the
  weights), or, under LoRA, from the same model with its adapter switched off (no second copy). Before the
  first step the two distributions are the same and the term is exactly zero.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from ..data.batches import IGNORE
from ..data.packing import model_inputs
from .hooks import Hook, is_peft, trainable


def token_kl(logits: torch.Tensor, reference_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_reference ‖ p) per position (rows of logits over the vocabulary), in fp32."""
    log_p = F.log_softmax(logits.float(), dim=-1)
    log_ref = F.log_softmax(reference_logits.float(), dim=-1)
    return (log_ref.exp() * (log_ref - log_p)).sum(-1)


class L2SP(Hook):
    """λ/2 · ‖θ − θ₀‖² over the trained parameters."""

    def __init__(self, strength: float) -> None:
        self.strength = strength

    def start(self, model) -> None:
        self.anchor = [(p, p.detach().clone()) for p in trainable(model)]

    @torch.no_grad()
    def before_step(self, model) -> None:
        for p, p0 in self.anchor:
            penalty = (p - p0) * self.strength
            p.grad = penalty if p.grad is None else p.grad.add_(penalty)

    @torch.no_grad()
    def finish(self, model) -> dict:
        squared = sum(float(((p - p0).double() ** 2).sum()) for p, p0 in self.anchor)
        return {"l2_sp_distance": round(squared ** 0.5, 6)}


class KLToBase(Hook):
    """β · KL(p_base ‖ p_θ) on the task's kept target tokens."""

    needs_logits = True

    def __init__(self, strength: float) -> None:
        self.strength = strength
        self.kl_sum: torch.Tensor | float = 0.0
        self.tokens: torch.Tensor | int = 0

    def start(self, model) -> None:
        self.reference = None
        if not is_peft(model):  # a frozen copy of the initial weights (LoRA: the adapter switched off)
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)

    def reference_logits(self, model, batch: dict) -> torch.Tensor:
        inputs = model_inputs(batch)
        with torch.no_grad():
            if self.reference is not None:
                return self.reference(**inputs).logits
            with model.disable_adapter() if is_peft(model) else nullcontext():
                return model(**inputs).logits

    def micro_loss(self, model, batch, logits, n_targets):
        labels = batch["labels"][:, 1:]
        kept = labels != IGNORE
        reference = self.reference_logits(model, batch)
        self.extra_forward_tokens += batch["tokens"]
        kl = token_kl(logits[:, :-1][kept], reference[:, :-1][kept]).sum()
        self.kl_sum, self.tokens = self.kl_sum + kl.detach(), self.tokens + kept.sum()
        return kl * (self.strength / max(1, n_targets))

    def finish(self, model) -> dict:
        self.reference = None  # the copy's memory, before the judging loads models
        per_token = float(self.kl_sum) / max(1, int(self.tokens))  # the run's one host sync for it
        return {"kl_base_training": round(per_token, 6)}
