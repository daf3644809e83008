"""The peak memory of work on the CPU, measured as a GPU measures it: the bytes the process's allocator holds
(glibc's `mallinfo2`: heap and mmapped chunks in use), sampled after every torch operation (a dispatch mode
sees each one, the backward pass's and the optimizer's too), less what was held when measuring began.

A checkpoint's weights are read from a file mapping that the allocator never sees; `weights_in_heap` copies
a loaded model's parameters into the heap, as a GPU holds them in its own memory."""

from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import contextmanager


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):  # glibc before 2.33
        return None
    libc.mallinfo2.restype = _MallInfo2
    return libc


LIBC = _libc()


def in_use() -> int:
    info = LIBC.mallinfo2()
    return info.uordblks + info.hblkhd


@contextmanager
def peak_bytes():
    """Yields a dict whose 'peak' is, on exit, the most bytes held above the start."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    found = {"high": 0}

    class Sampler(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            found["high"] = max(found["high"], in_use())
            return out

    with Sampler():  # the dispatch machinery's own first allocations, before the start
        torch.ones(2) * 2
    found["start"] = found["high"] = in_use()
    with Sampler():
        yield found
    found["peak"] = found["high"] - found["start"]


def weights_in_heap(monkeypatch) -> None:
    """Every model forgetmap loads has its parameters copied out of the checkpoint's file mapping."""
    import torch

    import forgetmap.models as models

    load = models.load_model

    def loaded(*args, **kwargs):
        model = load(*args, **kwargs)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.data = parameter.data.clone()
        return model

    monkeypatch.setattr(models, "load_model", loaded)
