"""What the gradient similarity job's projections cost, examples differentiated together against one at a time
(forgetmap.gradients; BENCHMARKS.md).

After the demo: on its base (1 thread, as the job runs it), `--upstream` upstream examples' projected gradients
and one task's mean projected gradient (its first `max_task_examples` training rows), each by the batched path
(vmap of grad over right-padded batches; the task's mean from one backward of the mean loss per batch) and by the
one-at-a-time path (`GRADIENT_BYTES` 0: what a large model takes), interleaved `--repeats` times. Printed: the
median seconds of each, their ratio, and the largest difference between the two paths' projections against
the largest projection.

    python benchmarks/gradient_cost.py --workdir .        # after the demo

With `--width 135m`: at SmolLM2-135M's shape (random weights, tied embeddings; 2 threads, as its example config's
job), `--upstream` examples of 40 tokens one at a time, the codes kept between examples (the job) against hashed
again for each (`KEPT_BYTES` 0: what every example cost before the codes were kept), interleaved.

    python benchmarks/gradient_cost.py --width 135m --upstream 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--task", default="mul_qa")
    parser.add_argument("--upstream", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", choices=("demo", "135m"), default="demo")
    args = parser.parse_args()
    if args.width == "135m":
        return real_width(args.upstream, args.repeats)

    import pandas as pd
    import torch
    import yaml

    from forgetmap import gradients
    from forgetmap.config import resolve
    from forgetmap.data.chat import encode_chat, encode_examples
    from forgetmap.data.upstream import read_rows
    from forgetmap.models import load_model, load_tokenizer

    torch.set_num_threads(1)
    cfg = resolve(yaml.safe_load((args.workdir / "config/config.yaml").read_text()))
    settings = cfg["models"][args.model]["correlations"]
    template = cfg["models"][args.model]["chat_template"]
    base = args.workdir / f"results/{args.model}/base"
    tokenizer = load_tokenizer(base)
    model = load_model(base, torch.device("cpu"), torch.float32, "sdpa")
    shards = sorted(str(p) for p in (args.workdir / "results/data/upstream").glob("*/shard-*.parquet"))
    upstream = encode_examples(tokenizer, read_rows(shards, np.arange(args.upstream)), template, settings["max_length"])
    frame = pd.read_parquet(min(args.workdir.glob(f"results/data/tasks/{args.task}.*.parquet")))
    frame = frame[frame["split"] == "train"].iloc[:settings["max_task_examples"]]
    task = encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(), template,
                       settings["max_length"])
    dim, seed, budget = settings["dim"], settings["seed"], gradients.GRADIENT_BYTES
    times: dict[str, list[float]] = {}
    found: dict[str, np.ndarray] = {}

    def timed(name, run):
        started = time.perf_counter()
        found[name] = run()
        times.setdefault(name, []).append(time.perf_counter() - started)

    for _ in range(args.repeats):
        gradients.GRADIENT_BYTES = budget
        timed("upstream, together", lambda: gradients.projected_gradients(model, upstream, dim, seed))
        timed("task mean, together", lambda: gradients.mean_projection(model, task, dim, seed))
        gradients.GRADIENT_BYTES = 0
        timed("upstream, one at a time", lambda: gradients.projected_gradients(model, upstream, dim, seed))
        timed("task mean, one at a time", lambda: gradients.projected_gradients(model, task, dim, seed).mean(0))
    for what, count in (("upstream", len(upstream)), ("task mean", len(task))):
        together, alone = (statistics.median(times[f"{what}, {how}"]) for how in ("together", "one at a time"))
        gap = np.abs(found[f"{what}, together"] - found[f"{what}, one at a time"]).max()
        print(f"{what} ({count} examples): together {together:.2f} s, one at a time {alone:.2f} s, "
              f"{alone / together:.2f}x; largest difference {gap:.2e} of {np.abs(found[f'{what}, one at a time']).max():.2f}")


def real_width(count: int, repeats: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from forgetmap import gradients
    from forgetmap.data.chat import Encoded

    torch.set_num_threads(2)
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    examples = [Encoded(rng.integers(0, 49152, 40), 10, 40) for _ in range(count)]
    gradients.projected_gradients(model, examples[:1], 1024)  # first touches: allocator, kernels
    times: dict[str, list[float]] = {}
    found = {}
    for _ in range(repeats):
        for name, budget in (("codes kept", 2**30), ("hashed for each example", 0)):
            gradients.KEPT_BYTES = budget
            started = time.perf_counter()
            found[name] = gradients.projected_gradients(model, examples, 1024)
            times.setdefault(name, []).append((time.perf_counter() - started) / count)
    kept, hashed = (statistics.median(times[n]) for n in ("codes kept", "hashed for each example"))
    gap = np.abs(found["codes kept"] - found["hashed for each example"]).max()
    print(f"135M parameters, {count} examples of 40 tokens, 2 threads: codes kept {kept:.2f} s per example (the codes "
          f"made once per job included), hashed for each {hashed:.2f} s, {hashed / kept:.2f}x; largest difference "
          f"{gap:.1e}")


if __name__ == "__main__":
    main()
