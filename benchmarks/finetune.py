"""Fine-tuning throughput (tokens/s, and MFU on GPU) of forgetmap's training loop.

    python benchmarks/finetune.py --shape demo --steps 30                  # CPU, the demo model
    python benchmarks/finetune.py --shape olmo-1b --device cuda --batch-size 4 --length 1024
    python benchmarks/finetune.py --shape demo --steps 40 --length 96 --packing   # padded and packed, side by side

`--packing`: examples of 8 to `--length` tokens (uniform), the same steps padded and packed in one process
(forgetmap.data.packing): each run's tokens/s over real tokens, their ratio, and both runs' final losses.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from common import build, machine, peak_flops
from forgetmap.data.batches import task_batches
from forgetmap.data.chat import Encoded
from forgetmap.models import n_parameters, set_threads
from forgetmap.train import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="demo", choices=["demo", "small", "olmo-1b", "pythia-1b"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=32, help="tokens per example")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--packing", action="store_true", help="varied lengths, padded against packed")
    args = parser.parse_args()

    set_threads(args.threads)
    device = torch.device(args.device)
    vocab = 512 if args.shape == "demo" else 50304
    attention = "sdpa"
    model = build(args.shape, vocab, device, torch.float32, attention)  # fp32 weights, bf16 autocast on GPU
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, args.length + 1, 512) if args.packing else np.full(512, args.length)
    data = [Encoded(rng.integers(0, vocab, n), int(n) // 2, int(n)) for n in lengths]
    settings = {"lr": 1e-5, "warmup_steps": 1, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": True,
                "gradient_checkpointing": args.gradient_checkpointing}
    runs = {}
    for packed in ((False, True) if args.packing else (False,)):
        model = build(args.shape, vocab, device, torch.float32, attention)  # the same seeded weights each run
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "log.jsonl"
            train(model, task_batches(data, args.batch_size, 1, 0), args.steps, {**settings, "packing": packed}, 0, log)
            rows = [json.loads(line) for line in log.read_text().splitlines()]
        steady = rows[len(rows) // 3:]  # skip warm-up steps
        seconds = sum(r["tokens"] / r["tokens_per_s"] for r in steady)
        runs["packed" if packed else "padded"] = (sum(r["tokens"] for r in steady) / seconds, rows[-1]["loss"])
    peak = peak_flops(device)
    tps = runs["padded"][0]
    result = {"shape": args.shape, "parameters": n_parameters(model), "device": machine(device),
              "batch": f"{args.batch_size} x {'8-' if args.packing else ''}{args.length}", "tokens_per_s": round(tps),
              "mfu": round(6 * n_parameters(model) * tps / peak, 4) if peak else None}
    if args.packing:
        result.update(packed_tokens_per_s=round(runs["packed"][0]), packed_over_padded=round(runs["packed"][0] / tps, 2),
                      final_loss_padded=runs["padded"][1], final_loss_packed=runs["packed"][1])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
