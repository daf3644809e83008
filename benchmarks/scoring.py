"""Scoring throughput: forgetmap's batched torch backend against a naive per-example loop.

Same model, same examples, same process, side by side. The naive loop is what a first script does:
one example at a time, full logits, log-softmax, gather.

    python benchmarks/scoring.py --shape demo --examples 2400            # CPU, the demo model
    python benchmarks/scoring.py --shape olmo-1b --examples 2000 --device cuda --length 512
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from common import build, machine, peak_flops, timed
from forgetmap.data import demo
from forgetmap.data.chat import Encoded, encode_examples
from forgetmap.models import n_parameters, pick_dtype, set_threads
from forgetmap.nll import TorchScorer, score_naive


def examples(shape: str, n: int, length: int, vocab: int) -> list[Encoded]:
    if shape == "demo":
        from forgetmap.base import pretraining_texts
        from forgetmap.models import train_demo_tokenizer

        corpus = demo.upstream_corpus(n, 1234)
        tok = train_demo_tokenizer(pretraining_texts(corpus), 512)
        return encode_examples(tok, corpus, "olmo", 96)
    # Dolma-like: lengths spread between length/8 and length, random token ids
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(2, length // 8), length + 1, n)
    return [Encoded(rng.integers(0, vocab, size=L), 1, int(L)) for L in lengths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="demo", choices=["demo", "small", "olmo-1b", "pythia-1b"])
    parser.add_argument("--examples", type=int, default=2400)
    parser.add_argument("--naive-examples", type=int, default=None, help="subset for the slow loop (default: all)")
    parser.add_argument("--length", type=int, default=256, help="max tokens per random example")
    parser.add_argument("--token-budget", type=int, default=16384)
    parser.add_argument("--max-padding", type=float, default=None, help="default: 0 on CPU, 0.1 on GPU")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    set_threads(args.threads)
    device = torch.device(args.device)
    dtype = pick_dtype("auto", device)
    vocab = 512 if args.shape == "demo" else 50304
    attention = "sdpa"
    model = build(args.shape, vocab, device, dtype, attention)
    encoded = examples(args.shape, args.examples, args.length, vocab)
    naive_set = encoded[: args.naive_examples or len(encoded)]
    scorer = TorchScorer(model, pad_id=0, token_budget=args.token_budget, max_padding=args.max_padding)
    scorer.score(encoded[:8])  # warm-up (kernels, allocator) for both paths
    score_naive(model, naive_set[:8])

    (nll, n_tokens), t_fast = timed(lambda: scorer.score(encoded), device)
    reference, t_naive = timed(lambda: score_naive(model, naive_set), device)
    processed = sum(len(e.ids) for e in encoded)
    processed_naive = sum(len(e.ids) for e in naive_set)
    fast_tps, naive_tps = processed / t_fast, processed_naive / t_naive
    flops = 2 * n_parameters(model) * processed / t_fast
    peak = peak_flops(device)
    k = len(naive_set)
    result = {
        "shape": args.shape, "parameters": n_parameters(model), "device": machine(device), "dtype": str(dtype),
        "examples": len(encoded), "tokens": processed, "forgetmap_tokens_per_s": round(fast_tps),
        "naive_tokens_per_s": round(naive_tps), "speedup": round(fast_tps / naive_tps, 2),
        "max_abs_diff_vs_naive": float(np.nanmax(np.abs(nll[:k] - reference))),
        "mfu": round(flops / peak, 4) if peak else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
