"""What sample-wise correctness costs, side by side with NLL scoring of the same items.

    python benchmarks/correctness_cost.py --checkpoint results/demo/base \
        --shard results/data/upstream/demo/shard-0.*.parquet
    python benchmarks/correctness_cost.py --scale    # 10,000 items x 4 options, and the transition statistics

1. On the demo (`--checkpoint`, `--shard`): the shard's items (those with an answer) scored for NLL
   (what the score job does for every example) against their correctness: multiple-choice options
   packed into one sequence per item, the same options as separate sequences (the baseline the
   packing beats), and greedy decoding of the free-form items. One thread, best of `--repeats`.
2. `--scale`: items/s of option scoring at 10,000 items x 4 options on a demo-shaped model with random
   weights, and the transition statistics (codes, Y, Y_BT, the rate table) for 85 tasks x 141,871 items.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def demo(args) -> None:
    import pandas as pd

    from forgetmap.correctness.items import OptionScorer, encode_items, evaluate_torch, greedy_from_scores
    from forgetmap.data.chat import encode_examples
    from forgetmap.data.upstream import scorable
    from forgetmap.models import load_model, load_tokenizer
    from forgetmap.nll import TorchScorer

    frame = pd.read_parquet(args.shard)
    items_frame = frame.iloc[scorable(frame)].reset_index(drop=True)
    tokenizer = load_tokenizer(args.checkpoint)
    model = load_model(args.checkpoint, torch.device("cpu"), torch.float32, "auto")
    settings = {"target_delimiter": " ", "chat_template": "olmo", "max_length": 96, "max_new_tokens": 32,
                "stop": ["\n\n"], "metric": "acc", "token_budget": 8192}
    encoded = encode_examples(tokenizer, items_frame, "olmo", 96)
    _, items = encode_items(tokenizer, items_frame, settings)
    choice = [it for it in items if not it.free_form]
    scorer = TorchScorer(model, tokenizer.pad_token_id, 8192)
    nll = best(lambda: scorer.score(encoded), args.repeats)
    packed = best(lambda: OptionScorer(scorer, packed=True).loglik(choice), args.repeats)
    separate = best(lambda: OptionScorer(scorer, packed=False).loglik(choice), args.repeats)
    decoded = best(lambda: evaluate_torch(model, tokenizer, items, settings, scorer), args.repeats)
    # as the score job runs it: the NLL pass also flags the spans that are greedy continuations, and
    # the free-form items among them are not decoded again
    flagged = best(lambda: scorer.score(encoded, greedy=True), args.repeats)
    is_greedy = scorer.score(encoded, greedy=True)[2]
    known = greedy_from_scores(items, encoded, is_greedy, tokenizer.eos_token_id, settings["max_new_tokens"])
    rest = best(lambda: evaluate_torch(model, tokenizer, items, settings, scorer, known), args.repeats)
    whole = rest + max(0.0, flagged - nll)
    print(f"demo shard: {len(items)} items ({len(choice)} multiple choice, {len(items) - len(choice)} free form), "
          f"one thread, best of {args.repeats}")
    print(f"  NLL of the items            {nll:8.3f} s")
    print(f"  options packed              {packed:8.3f} s   ({packed / nll:.2f}x the NLL)")
    print(f"  options as separate seqs    {separate:8.3f} s   ({separate / nll:.2f}x; packing is {separate / packed:.2f}x faster)")
    print(f"  all, every free form decoded {decoded:7.3f} s   ({decoded / nll:.2f}x the NLL)")
    print(f"  all, as the score job runs   {whole:7.3f} s   ({whole / nll:.2f}x the NLL: {len(known)} free-form "
          f"answers found greedy by the NLL pass, whose flags cost {max(0.0, flagged - nll):.3f} s, are not decoded)")


def scale(args) -> None:
    from forgetmap.correctness.items import Item, OptionScorer
    from forgetmap.models import build_demo_model
    from forgetmap.nll import TorchScorer
    from forgetmap.correctness.transitions import backward_transfer_matrix, forgetting_matrix, rate_table, transition_codes

    class Vocab:
        pad_token_id, eos_token_id = 0, 1

        def __len__(self):
            return 512

    arch = {"hidden_size": 128, "intermediate_size": 384, "layers": 4, "heads": 4, "max_position_embeddings": 256}
    model = build_demo_model(Vocab(), arch, 0).eval()
    rng = np.random.default_rng(0)
    items = [Item(rng.integers(2, 512, 40), [rng.integers(2, 512, 3) for _ in range(4)], list("abcd"), 0, False)
             for _ in range(args.items)]
    scorer = TorchScorer(model, 0, 8192)
    packed = best(lambda: OptionScorer(scorer, packed=True).loglik(items), 1)
    separate = best(lambda: OptionScorer(scorer, packed=False).loglik(items), 1)
    print(f"{args.items} items x 4 options (context 40, options 3 tokens), demo-shaped model, one thread: "
          f"packed {args.items / packed:,.0f} items/s, separate {args.items / separate:,.0f} items/s "
          f"({separate / packed:.2f}x)")

    m, n = 85, 141_871
    before = (rng.random(n) < 0.6).astype(np.float64)
    after = np.where(rng.random((m, n)) < 0.1, 1 - before, before)
    k = rng.choice([0, 2, 3, 4, 5], n).astype(np.int16)
    sources = rng.choice([f"source{i}" for i in range(10)], n)
    categories = {f"task{i}": f"cat{i % 5}" for i in range(m)}
    start = time.perf_counter()
    transition_codes(before, after)
    forgetting_matrix(before, after)
    backward_transfer_matrix(before, after)
    table = rate_table(before, after, k, sources, list(categories), categories)
    elapsed = time.perf_counter() - start
    print(f"transition statistics, {m} tasks x {n:,} items (codes, Y, Y_BT, {len(table)} rate rows): {elapsed:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("--shard")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--items", type=int, default=10_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.checkpoint:
        demo(args)
    if args.scale:
        scale(args)


if __name__ == "__main__":
    main()
