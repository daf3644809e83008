"""Where a mitigation method changes fine-tuning besides its batches: the parameters it trains, a term it
adds to the loss, and the weights after each step and after training.

`train()` is one loop; a method is one `Hook` (its own module: forgetmap.mitigation.freezing, .anchors,
.ema) that overrides the places it uses, and an arm's hooks run in order (`Hooks`). Every place is a
no-op by default, so plain fine-tuning is the loop with no hooks at all:

- `start(model)` before the optimizer is built (freeze parameters, copy the initial weights);
- `micro_loss(model, batch, logits, n_targets)` a term added to a micro-batch's loss, normalised like the
  task loss (over the step's kept target tokens); `needs_logits` asks the loop for every position's
  logits (the kept-positions-only head path is then off);
- `before_step(model)` with the step's gradients complete, before clipping (a penalty's gradient);
- `after_step(model)` after the optimizer step (a running average of the weights);
- `finish(model)` after the last step: a transform of the weights, and facts for the run's summary.

`extra_forward_tokens` counts the tokens of forward passes a hook adds (a reference model's), for the
cost table.
"""

from __future__ import annotations

import torch


class Hook:
    """One method's changes to the training loop; every place does nothing unless overridden."""

    needs_logits = False
    extra_forward_tokens = 0  # a hook that runs forward passes of its own counts their tokens here

    def start(self, model) -> None:
        pass

    def micro_loss(self, model, batch: dict, logits: torch.Tensor, n_targets: int) -> torch.Tensor | None:
        return None

    def before_step(self, model) -> None:
        pass

    def after_step(self, model) -> None:
        pass

    def finish(self, model) -> dict:
        return {}


class Hooks(Hook):
    """Several hooks, run in the order given (an arm's freezing before its anchor, its EMA last)."""

    def __init__(self, hooks: list[Hook] | None = None) -> None:
        self.hooks = list(hooks or [])
        self.needs_logits = any(h.needs_logits for h in self.hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def start(self, model) -> None:
        for hook in self.hooks:
            hook.start(model)

    def micro_loss(self, model, batch, logits, n_targets):
        terms = [t for t in (h.micro_loss(model, batch, logits, n_targets) for h in self.hooks) if t is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def before_step(self, model) -> None:
        for hook in self.hooks:
            hook.before_step(model)

    def after_step(self, model) -> None:
        for hook in self.hooks:
            hook.after_step(model)

    def finish(self, model) -> dict:
        facts: dict = {}
        for hook in self.hooks:
            facts.update(hook.finish(model))
        return facts

    @property
    def extra_forward_tokens(self) -> int:
        return sum(h.extra_forward_tokens for h in self.hooks)


def trainable(model) -> list[torch.nn.Parameter]:
    """The parameters the optimizer updates (after the hooks' `start`)."""
    return [p for p in model.parameters() if p.requires_grad]


def is_peft(model) -> bool:
    """Is `model` a peft model (LoRA: the base is the adapter switched off)?"""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")
