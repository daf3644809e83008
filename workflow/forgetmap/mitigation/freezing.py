"""Layer freezing: train only the top n transformer blocks, or only named modules; every other weight
keeps the base model's value bit for bit (it never reaches the optimizer).

The blocks are the model's list of decoder layers (the module list whose entries are the classes the
architecture names unsplittable, `_no_split_modules`: LlamaDecoderLayer, OlmoDecoderLayer,
GPTNeoXLayer, ...); "top" is the output end. Named modules match as LoRA's target modules do: a module
whose qualified name is the name or ends with "." + the name (`mlp`, `self_attn`, `lm_head`,
`layers.3`). Under LoRA only the adapters inside the chosen part train.
"""

from __future__ import annotations

from ..models import blocks, matching_modules, module_names
from .hooks import Hook

__all__ = ["Freeze", "blocks"]


class Freeze(Hook):
    """Only the top `top` blocks, or only the modules named in `modules`, train."""

    def __init__(self, top: int | None = None, modules: list[str] | None = None) -> None:
        self.top, self.modules = top, modules

    def start(self, model) -> None:
        if self.top is not None:
            layers = blocks(model)
            if self.top > len(layers):
                raise ValueError(f"train_top {self.top}: the model has {len(layers)} transformer blocks")
            keep = {id(p) for block in list(layers)[len(layers) - self.top:] for p in block.parameters()}
        else:
            matched = matching_modules(model, self.modules)
            missing = [t for t, found in matched.items() if not found]
            if missing:
                raise ValueError(f"train_modules {', '.join(missing)}: no such module in {type(model).__name__}; its "
                                 f"modules: {', '.join(module_names(model))}")
            modules = dict(model.named_modules())
            keep = {id(p) for found in matched.values() for n in found for p in modules[n].parameters()}
        for p in model.parameters():
            if id(p) not in keep:
                p.requires_grad_(False)
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError("layer freezing left no parameter to train (under LoRA: no adapter in the trained part)")

    def finish(self, model) -> dict:
        return {"trained_parameters": int(sum(p.numel() for p in model.parameters() if p.requires_grad))}
