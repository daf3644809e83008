"""Generation, per decode step: forgetmap's loop against transformers' `generate` at the same batch.

Same model, same prompts, same process, side by side. Every operator torch dispatches is counted (a dispatch
mode sees each one, the model's and the loop's), and each read back to the host (`bool()` of a tensor, an
`.item()`, a copy to the host: on a GPU each waits for the device) is counted apart, the model's own and the
loop's. Per decode step is the difference between a run of `--new` tokens and one of 8, over the steps
between. On a GPU it also times both (tokens written per second, best of three).

    python benchmarks/generation_steps.py                       # CPU, a tiny Llama: counts only
    python benchmarks/generation_steps.py --shape olmo-1b --device cuda --rows 64 --prompt 960 --new 64
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np
import torch

HOST_READS = {"is_nonzero", "_local_scalar_dense", "item", "equal", "allclose"}


def _reads_to_host(func, args, kwargs) -> bool:
    """A value read back (`bool()`, `.item()`) or a copy from a device to the host."""
    name = func.overloadpacket.__name__
    if name in HOST_READS:
        return True
    if name in ("_to_copy", "copy_"):
        tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        target = (kwargs or {}).get("device")
        return any(t.device.type not in ("cpu", "meta") for t in tensors) and (
            name == "copy_" and tensors[0].device.type == "cpu" or target is not None and torch.device(target).type == "cpu")
    return False


def counted(run, model) -> dict:
    """Operators and reads to the host of `run()`, the model's forward apart from the loop around it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    inside = [0]
    counts = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            where = "model" if inside[0] else "loop"
            counts[f"{where} ops"] += 1
            if _reads_to_host(func, args, kwargs):
                counts[f"{where} host reads"] += 1
            return func(*args, **(kwargs or {}))

    import forgetmap.generation as generation

    to_host = generation._to_host

    def counted_to_host(tensor):  # on the CPU a copy to the host is no copy: forgetmap's reads counted here
        if tensor.device.type == "cpu":
            counts["loop host reads"] += 1
        return to_host(tensor)

    enter = model.register_forward_pre_hook(lambda *a: inside.__setitem__(0, inside[0] + 1))
    leave = model.register_forward_hook(lambda *a: inside.__setitem__(0, inside[0] - 1))
    generation._to_host = counted_to_host
    try:
        with Count():
            run()
    finally:
        enter.remove()
        leave.remove()
        generation._to_host = to_host
    return dict(counts)


def per_step(run, model, new: int) -> dict:
    """Counts per decode step: (run of `new` tokens - run of 8 tokens) / (new - 8)."""
    short, long = counted(lambda: run(8), model), counted(lambda: run(new), model)
    keys = sorted(set(short) | set(long))
    return {k: round((long.get(k, 0) - short.get(k, 0)) / (new - 8), 3) for k in keys}


def runners(model, tokenizer, prompts: list[np.ndarray], temperature: float, top_p: float, budget: int):
    """(forgetmap's run, generate's run) of n new tokens for every prompt (random weights: EOS all but never
    chosen, and `generate` is given nothing it would not be given by default: no minimum length)."""
    from forgetmap.generation import Sampling, generate_torch

    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.from_numpy(np.asarray(p))
        mask[r, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    sampling = Sampling(temperature, top_p)

    def ours(n, static=None):  # static: the cache allocated whole, the step compiled on CUDA (StaticDecoding)
        return generate_torch(model, tokenizer, prompts, np.full(len(prompts), n), sampling, 0, budget, static=static)

    def theirs(n):
        sample = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if temperature else \
            {"do_sample": False}
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, pad_token_id=pad_id, **sample)
        assert out.shape[1] == width + n, "every row ended early: the counts would not be per step"
        return out

    return ours, theirs


def main() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from common import build, machine, timed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="tiny", choices=["tiny", "demo", "small", "olmo-1b", "pythia-1b"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=24, help="prompt tokens (rows vary by up to a quarter)")
    parser.add_argument("--new", type=int, default=40)
    args = parser.parse_args()

    from forgetmap.models import pick_dtype, set_threads
    from standins import build_model, train_tokenizer

    set_threads(1)
    device = torch.device(args.device)
    tokenizer = train_tokenizer("llama")
    if args.shape == "tiny":
        model = build_model("llama", tokenizer, seed=1, max_positions=4096).to(device)
    else:
        model = build(args.shape, len(tokenizer), device, pick_dtype("auto", device))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, len(tokenizer) - 1, args.prompt - rng.integers(0, args.prompt // 4 + 1))
               for _ in range(args.rows)]
    budget = args.rows * (args.prompt + args.new)  # one batch on the CPU, as `generate` takes it
    for mode, (temperature, top_p) in {"greedy": (0.0, 1.0), "sampled": (0.7, 0.95)}.items():
        ours, theirs = runners(model, tokenizer, prompts, temperature, top_p, budget)
        result = {"mode": mode, "shape": args.shape, "device": machine(device), "rows": args.rows,
                  "prompt": args.prompt, "new": args.new,
                  "forgetmap": per_step(ours, model, args.new), "generate": per_step(theirs, model, args.new)}
        if device.type == "cuda":
            for name, run in (("forgetmap", ours), ("generate", theirs)):
                run(8)  # warm-up
                seconds = min(timed(lambda: run(args.new), device)[1] for _ in range(3))
                result[f"{name}_tokens_per_s"] = round(args.rows * args.new / seconds)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
