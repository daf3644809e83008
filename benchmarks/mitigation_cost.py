"""What mitigation costs: replay selection at paper scale, and an arm's fine-tune against plain fine-tuning.

    python benchmarks/mitigation_cost.py [--pool 141871] [--steps 50] [--ratio 0.125] [--repeats 3]

1. Selecting replay examples from the paper's pool (141,871 examples less 10,000 held out) with
   softmax(score / 0.1) weights, without replacement (target: under 1 s); and the online arm's step
   inside training: 30 measured probes folded into mf (fitted on 46 train rows beforehand), then the
   draw (target: under 1 s).
2. The demo model (random weights), side by side in one process: plain fine-tuning for `steps`, a
   replay arm (the same task examples plus int(n x ratio) + 1 replayed ones, steps x (1 + ratio)), and an
   STM arm (the top 20 % of target tokens masked). Targets: replay at most (1 + ratio) x 1.05 of plain,
   STM at most 1.05x. Each arm runs `repeats` times in turn; the medians are compared. Beside them, the
   arena's training changes on the plain batches: L2-SP, the KL anchor (a frozen copy's forward pass per
   micro-batch), EMA, training only the top block, and LoRA (rank 16 on q_proj, v_proj).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from common import build, machine
from forgetmap.data.batches import task_batches
from forgetmap.data.chat import Encoded
from forgetmap.mitigation.replay import heldout_examples, mixture_batches, replay_count, replay_steps, select_replay
from forgetmap.mitigation.tokens import stm_masks
from forgetmap.mitigation.anchors import KLToBase, L2SP
from forgetmap.mitigation.ema import EMA
from forgetmap.mitigation.freezing import Freeze
from forgetmap.mitigation.hooks import Hooks
from forgetmap.models import set_threads
from forgetmap.train import attach_lora, train


def selection_seconds(pool_size: int, repeats: int) -> dict:
    heldout = heldout_examples(pool_size, 10_000, seed=0)
    pool = np.setdiff1d(np.arange(pool_size), heldout)
    scores = np.random.default_rng(0).normal(0.05, 0.2, pool_size)
    times = []
    for seed in range(repeats):
        start = time.perf_counter()
        select_replay(replay_count(8_000, 1 / 32), pool, seed, scores[pool], 0.1)
        times.append(time.perf_counter() - start)
    return {"pool": len(pool), "replayed": replay_count(8_000, 1 / 32), "selection_s": round(statistics.median(times), 4)}


def online_seconds(pool_size: int, repeats: int) -> dict:
    """The online arm's step inside training at paper scale: fold 30 measured probes into mf fitted on 46
    train rows of a 141,871-column matrix, then draw the replay examples (the fit happens before training)."""
    from forgetmap.predict.registry import make_method

    rng = np.random.default_rng(0)
    z = (rng.normal(size=(46, 5)) @ rng.normal(size=(5, pool_size)) * 0.1
         + rng.normal(0, 0.05, (46, pool_size))).astype(np.float32)
    start = time.perf_counter()
    method = make_method("mf").fit(z)
    fit = time.perf_counter() - start
    pool = np.setdiff1d(np.arange(pool_size), heldout_examples(pool_size, 10_000, seed=0))
    times = []
    for seed in range(repeats):
        probes = np.sort(rng.choice(pool, 30, replace=False))
        start = time.perf_counter()
        row = method.predict(probes[None, :], rng.normal(0.05, 0.1, (1, 30)))[0]
        select_replay(replay_count(8_000, 1 / 32), pool, seed, row[pool], 0.1)
        times.append(time.perf_counter() - start)
    return {"fit_before_training_s": round(fit, 3), "online_step_s": round(statistics.median(times), 4)}


def finetune_seconds(steps: int, ratio: float, repeats: int) -> dict:
    set_threads(1)
    rng = np.random.default_rng(0)
    task = [Encoded(rng.integers(0, 512, 40), 20, 39) for _ in range(180)]
    replay = [Encoded(rng.integers(0, 512, 24), 1, 24) for _ in range(replay_count(len(task), ratio))]
    losses = [rng.random(len(e.ids) - e.target_start).astype(np.float32) for e in task]
    masked, _ = stm_masks(task, losses, "quantile", q=0.2)
    settings = {"lr": 5e-4, "warmup_steps": 5, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": True,
                "gradient_checkpointing": False}
    plain_batches = lambda: (task_batches(task, 16, 1, 0), steps)  # noqa: E731
    arms = {"plain": (plain_batches, list),
            "replay": (lambda: (mixture_batches(task, replay, 16, 1, 0), replay_steps(steps, ratio)), list),
            "stm": (lambda: (task_batches(masked, 16, 1, 0), steps), list),
            # the arena's training changes (forgetmap.mitigation.hooks), on the plain batches
            "l2_sp": (plain_batches, lambda: [L2SP(1.0)]), "kl_base": (plain_batches, lambda: [KLToBase(1.0)]),
            "ema": (plain_batches, lambda: [EMA(0.9)]), "train_top_1": (plain_batches, lambda: [Freeze(top=1)]),
            "lora_r16": (plain_batches, "lora")}
    times = {name: [] for name in arms}
    for _ in range(repeats):
        for name, (make, hooks) in arms.items():
            model = build("demo", 512, torch.device("cpu"), torch.float32)
            if hooks == "lora":
                model, hooks = attach_lora(model, {"r": 16, "alpha": 16, "dropout": 0.0,
                                                   "target_modules": ["q_proj", "v_proj"]}, 0), list
            batches, n = make()
            start = time.perf_counter()
            train(model, batches, n, settings, 0, None, hooks=Hooks(hooks()))
            times[name].append(time.perf_counter() - start)
    plain = statistics.median(times["plain"])
    return {"steps": steps, "ratio": ratio, "plain_s": round(plain, 3),
            "replay_vs_plain": round(statistics.median(times["replay"]) / plain, 3),
            "replay_bound": round((1 + ratio) * 1.05, 3),
            "stm_vs_plain": round(statistics.median(times["stm"]) / plain, 3), "stm_bound": 1.05,
            **{f"{name}_vs_plain": round(statistics.median(times[name]) / plain, 3)
               for name in ("l2_sp", "kl_base", "ema", "train_top_1", "lora_r16")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=141_871)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--ratio", type=float, default=0.125)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps({"machine": machine(torch.device("cpu")), **selection_seconds(args.pool, args.repeats)}))
    print(json.dumps(online_seconds(args.pool, args.repeats)))
    print(json.dumps(finetune_seconds(args.steps, args.ratio, args.repeats)))


if __name__ == "__main__":
    main()
