"""One rank (torchrun, gloo) of a model sharded by FSDP, measuring probes through forgetmap's ProbeMeter:
`python -m torch.distributed.run --nproc_per_node=2 meter_run.py BASE OUT fsdp2|fsdp1 PROBES...`. For each probes
file it shards the model afresh, measures the probes, trains one step, measures again and trains another step (so
a measure that left the shards unfit for training shows); then a benchmark's items (options and generated answers)
alike, and a generation whose rows end earlier on one rank than on the other (ranks in step); rank 0 writes OUT
(JSON). tests/unit/test_monitor.py runs two of it."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path


def sharded(model, how: str):
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    from forgetmap.sharded import shard

    if how == "fsdp2":
        shard(model, mixed_precision=False)
        return model
    blocks = {type(m) for m in model.modules() if type(m).__name__ in model._no_split_modules}
    return FullyShardedDataParallel(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                                               transformer_layer_cls=blocks),
                                    use_orig_params=True, device_id=torch.device("cpu"))


def train_step(model, tokenizer, texts):
    """One AdamW step on `texts` (a fresh optimizer: the same update wherever it runs)."""
    import torch

    batch = tokenizer(texts, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    model(**batch, labels=labels).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    model.zero_grad(set_to_none=True)


def option_items(tokenizer, n: int = 5):
    """Multiple-choice items (2 or 3 options, contexts of different lengths) for the OptionMeter's sharded test."""
    import numpy as np

    from forgetmap.correctness.items import Item
    from standins import sentences

    texts = sentences(n + 3, seed=9)
    items = []
    for i in range(n):
        options = [" " + w for w in texts[n + i % 3].split()[: 2 + i % 2]]
        items.append(Item(np.asarray(tokenizer(texts[i])["input_ids"], dtype=np.int64),
                          [np.asarray(tokenizer(o, add_special_tokens=False)["input_ids"], dtype=np.int64)
                           for o in options], options, i % len(options), False))
    return items


def generated_items(tokenizer, n: int = 3):
    """Free-form items (greedy answers ended at ".") and how each is generated, for the OptionMeter's sharded test."""
    import numpy as np

    from forgetmap.correctness.benchmark import Generated
    from forgetmap.correctness.items import ExactMatch, Item
    from standins import sentences

    items = [Item(np.asarray(tokenizer(t)["input_ids"], dtype=np.int64), [], ["river"], 0, True)
             for t in sentences(n, seed=21)]
    return items, {i: Generated((".",), 8 + 2 * i, ExactMatch("river", (".",))) for i in range(n)}


def main(base: str, out: str, how: str, probe_files: list[str]) -> None:
    import pandas as pd
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.meter import ProbeMeter
    from standins import sentences

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    tokenizer = AutoTokenizer.from_pretrained(base)
    texts = sentences(4, seed=5)
    found = {}
    for probes in probe_files:
        probes = probes.format(rank=dist.get_rank())  # a file per rank: ranks that disagree
        model = sharded(AutoModelForCausalLM.from_pretrained(base), how)
        meter = ProbeMeter.for_rows(model, tokenizer, pd.read_parquet(probes), "auto", 64, token_budget=64)
        before = meter.measure()
        train_step(model, tokenizer, texts)
        after = meter.measure()
        train_step(model, tokenizer, texts)  # the shards still train after a measure
        found[probes] = {"kind": meter.kind, "batches": len(meter.batches), "repeats": meter.repeats,
                         "before": before.tolist(), "after": after.tolist()}
        counts = [None] * dist.get_world_size()
        dist.all_gather_object(counts, (len(meter.batches), meter.repeats))
        found[probes]["ranks"] = counts
    # a benchmark's items, options packed and answers generated, through the same shards: in step, every value held
    from forgetmap.generation import InStep, Sampling, generate_torch
    from forgetmap.meter import OptionMeter

    free, generated = generated_items(tokenizer)
    items = option_items(tokenizer) + free
    model = sharded(AutoModelForCausalLM.from_pretrained(base), how)
    meter = OptionMeter(model, tokenizer, items, [f"item{i}" for i in range(len(items))], token_budget=48,
                        generated={5 + i: g for i, g in generated.items()})
    before = [v if isinstance(v, str) else v.tolist() for v in meter.measure()]
    train_step(model, tokenizer, texts)
    after = [v if isinstance(v, str) else v.tolist() for v in meter.measure()]
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, (len(meter.batches), meter.repeats))
    found["items"] = {"packed": meter.options.packed, "before": before, "after": after, "ranks": counts}
    # rank 1's rows end at the first space, rank 0's at ".": rank 1 runs on until rank 0's are done; rank 0's kept
    stop = (".",) if dist.get_rank() == 0 else (" ",)
    answers = generate_torch(model, tokenizer, [it.context for it in free], [12] * len(free), Sampling(stop=stop),
                             token_budget=48, in_step=InStep(torch.device("cpu")), inference=False)
    train_step(model, tokenizer, texts)  # the shards still train after generating
    held = [None] * dist.get_world_size()
    dist.all_gather_object(held, answers.texts)
    found["in_step"] = held
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4], sys.argv[4:])
