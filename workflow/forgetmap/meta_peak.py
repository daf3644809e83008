"""The most bytes a model's work holds at once, traced at the model's real widths on the meta device.

A model built on the meta device has shapes and no storage: its forward (and backward) runs in
milliseconds at 7B or 13B and allocates nothing, yet every tensor it creates has the size the real one would
have. `peak_bytes` follows them as a GPU's caching allocator sees them: a dispatch mode adds each new
storage an operation returns, a finalizer subtracts it when the last view of it dies, and the peak of that
sum is what the work holds beyond its weights (the model's parameters are created before tracing, so they
are not counted; gradients the backward pass creates are).

Two things a meta tensor cannot do are decided here, as the GPU run they stand for would:
- a value read back to Python (`.item()`, `bool(mask.all())`) reads as False/0: transformers then builds
  the padded batch's full attention mask, the larger of its two paths;
- scaled-dot-product attention on the meta device takes the math path (fp32 scores of every query and
  key); on a GPU it is flash or memory-efficient attention, which keeps the output and one fp32
  log-sum-exp per query and head. `flash=True` traces that kernel's footprint instead; `flash=False`
  keeps the math path, for models run with eager attention.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager


def meta_model(config, dtype: str = "float32", attention: str = "sdpa", causal: bool = True):
    """The model of a transformers `config` on the meta device, in `dtype`, with `attention`."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    kind = AutoModelForCausalLM if causal else AutoModel
    with torch.device("meta"):
        model = kind.from_config(config, attn_implementation=attention, dtype=getattr(torch, dtype))
    model.tie_weights()
    return model


def _tracker():
    import torch
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    class LiveBytes(TorchDispatchMode):
        """The bytes of every storage created under it and still alive; `peak` the most at once."""

        def __init__(self):
            super().__init__()
            self.live = self.peak = 0
            self.sizes: dict = {}

        def _free(self, key) -> None:
            self.live -= self.sizes.pop(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:  # a value read back: see the module's note
                return False
            out = func(*args, **(kwargs or {}))
            # a view (of a weight, of an input) returns its input's storage: nothing new is held
            held = {id(t.untyped_storage()) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for tensor in pytree.tree_leaves(out):
                if isinstance(tensor, torch.Tensor):
                    storage = tensor.untyped_storage()
                    key = id(storage)
                    if key not in self.sizes and key not in held:
                        self.sizes[key] = storage.nbytes()
                        self.live += self.sizes[key]
                        self.peak = max(self.peak, self.live)
                        weakref.finalize(storage, self._free, key)
            return out

    return LiveBytes()


@contextmanager
def _flash_attention():
    """scaled_dot_product_attention as flash attention holds it: the output and an fp32 log-sum-exp per query
    and head (freed after the call without autograd), never the scores."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    class Flash(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.scaled_dot_product_attention:
                query, value = args[0], args[2] if len(args) > 2 else kwargs["value"]
                torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)  # the log-sum-exp
                return torch.empty((*query.shape[:-1], value.shape[-1]), dtype=query.dtype, device=query.device)
            return func(*args, **kwargs)

    with Flash():
        yield


def peak_bytes(work, flash: bool = True, setup=None) -> int:
    """The most bytes `work()` (a function of meta tensors) holds at once above what existed before it. With
    `setup`, `work(setup())`: what setup leaves alive is counted (its storages are followed as they are freed
    or replaced), its own peak is not."""
    import contextlib

    tracker = _tracker()
    with tracker, (_flash_attention() if flash else contextlib.nullcontext()):
        if setup is None:
            work()
        else:
            state = setup()
            tracker.peak = tracker.live
            work(state)
    return int(tracker.peak)
