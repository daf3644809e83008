"""A tiny fine-tune with the forgetting monitor attached, for the monitor's tests; run under torchrun
(`python -m torch.distributed.run --nproc_per_node=2 monitor_run.py BASE MAP OUT --parallel zero3`) it is one rank of
a data-parallel or sharded run (gloo on the CPU), and rank 0 writes what the monitor held (`OUT/monitor.json`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from standins import TULU_TEMPLATE, save_standin, sentences

MAX_LENGTH = 64
N_LM, N_CHAT, TASKS = 70, 30, 6


def upstream(directory):
    """Two shards of the upstream contract: plain text, then chat pairs (a corpus without items)."""
    texts = sentences(N_LM + 2 * N_CHAT, seed=11)
    rows = [{"example_id": f"lm-{i}", "source": "prose", "kind": "lm", "text": texts[i], "prompt": None,
             "response": None} for i in range(N_LM)]
    rows += [{"example_id": f"chat-{i}", "source": "dialogue", "kind": "chat", "text": None,
              "prompt": texts[N_LM + 2 * i], "response": texts[N_LM + 2 * i + 1]} for i in range(N_CHAT)]
    frame = pd.DataFrame(rows)
    directory.mkdir(parents=True)
    half = len(frame) // 2
    for shard, part in enumerate((frame.iloc[:half], frame.iloc[half:])):
        part.to_parquet(directory / f"shard-{shard}.parquet", index=False)
    return frame


def monitored_base(root, device: str = "cpu"):
    """(the base model's directory, the forgetting matrix's path, the upstream directory, its map's path) under
    `root`: an OLMo-2 stand-in, Z low-rank plus noise over six fit tasks, measured against the base's own NLL scored
    forgetmap's way (on `device`)."""
    from forgetmap.data.chat import encode_examples
    from forgetmap.matrix import ForgettingMatrix
    from forgetmap.models import load_model, load_tokenizer
    from forgetmap.monitor import ForecastMap
    from forgetmap.nll import TorchScorer

    base = save_standin(root / "base", "olmo2", TULU_TEMPLATE, seed=3, width=32)
    frame = upstream(root / "upstream")
    tokenizer = load_tokenizer(base)
    model = load_model(base, __import__("torch").device(device), __import__("torch").float32)
    base_nll, _ = TorchScorer(model, tokenizer.pad_token_id).score(encode_examples(tokenizer, frame, "auto", MAX_LENGTH))
    rng = np.random.default_rng(0)
    z = rng.normal(size=(TASKS, 2)) @ rng.normal(size=(2, len(frame))) * 0.2 + rng.normal(size=(TASKS, len(frame))) * 0.02
    z[0, 5] = np.nan  # one example unmeasured under a fit task: not usable
    tasks = [f"task{t}" for t in range(TASKS)]
    matrix = ForgettingMatrix(z, tasks, frame["example_id"].to_numpy(), frame["source"].to_numpy(), base_nll,
                              {t: "all" for t in tasks}, {"all": "g"})
    matrix.write(root / "forgetting.parquet", {"model": "standin"})
    forecast_map = ForecastMap.from_matrix(root / "forgetting.parquet", root / "upstream", k=8, max_length=MAX_LENGTH,
                                           model=model, tokenizer=tokenizer, audit=30)  # (not the default 60: cheaper checks)
    forecast_map.write(root / "map.parquet")
    return base, root / "forgetting.parquet", root / "upstream", root / "map.parquet"


QUIZ_WORDS = ["river", "stone", "cloud", "field", "tower", "glass"]


def quiz_frame(n: int = 12) -> pd.DataFrame:
    """`n` three-option multiple-choice items (OLMo-core's and Axolotl's tests watch them): a prompt, its choices
    and the answer."""
    questions = sentences(n, seed=21)
    return pd.DataFrame({"example_id": [f"q{i}" for i in range(n)], "prompt": [f"{q} Answer:" for q in questions],
                         "choices": [[QUIZ_WORDS[(i + j) % 6] for j in range(3)] for i in range(n)],
                         "answer": [QUIZ_WORDS[(i + i % 3) % 6] for i in range(n)]})


def make_trainer(kind, base, output_dir, monitor=None, max_steps=6, **extra):
    """A tiny fine-tune of the stand-in on sentences that are not the upstream's (a few steps at a high rate, so
    the probes move): transformers' Trainer on tokenized rows, or TRL's SFTTrainer on a text column."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base)
    texts = [t.upper() for t in sentences(48, seed=21)]
    packing = extra.pop("packing", False)
    peft_config = extra.pop("peft_config", None)  # TRL's: the trainer wraps the model in LoRA adapters
    common = dict(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=4,
                  learning_rate=extra.pop("learning_rate", 5e-3),
                  eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2, logging_steps=1,
                  report_to="none", use_cpu=extra.pop("use_cpu", True), disable_tqdm=True, seed=0, **extra)
    if kind == "trl":
        from trl import SFTConfig, SFTTrainer

        data = Dataset.from_dict({"text": texts})
        trainer = SFTTrainer(model=model, args=SFTConfig(max_length=MAX_LENGTH, packing=packing, **common),
                             train_dataset=data.select(range(40)), eval_dataset=data.select(range(40, 48)),
                             processing_class=tokenizer, peft_config=peft_config)
    else:
        from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

        data = Dataset.from_dict(dict(tokenizer(texts, truncation=True, max_length=MAX_LENGTH)))
        trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=data.select(range(40)),
                          eval_dataset=data.select(range(40, 48)), processing_class=tokenizer,
                          data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    if monitor is not None:
        monitor.attach(trainer)
    return trainer


PARALLEL = ("ddp", "zero3", "fsdp1", "fsdp2")


def watched_items(base):
    """meter_run's items as a benchmark the monitor watches: five multiple-choice and three generated answers, 6 of
    them scored at each check (no map: their own estimate)."""
    import numpy as np
    from transformers import AutoTokenizer

    from forgetmap.correctness.benchmark import Benchmark
    from forgetmap.monitor.items import ItemWatch
    from meter_run import generated_items, option_items

    tokenizer = AutoTokenizer.from_pretrained(base)
    free, generated = generated_items(tokenizer)
    items = option_items(tokenizer) + free
    benchmark = Benchmark(np.array([f"item{i}" for i in range(len(items))]), np.array(["bench"] * len(items)), items,
                          "acc", {"where": "meter_run's items"}, {5 + i: g for i, g in generated.items()})
    return ItemWatch(benchmark, k=6)


def parallel_arguments(parallel: str, model_type_block: str) -> dict:
    """TrainingArguments that shard the run as `parallel` says: DeepSpeed ZeRO-3 with every parameter partitioned
    (a tiny model's parameters are all below the default persistence threshold), or accelerate's FSDP (2: fully_shard,
    1: the FullyShardedDataParallel wrapper) on every decoder block; 'ddp': nothing (torchrun's ranks)."""
    if parallel == "zero3":
        return {"deepspeed": {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                              "bf16": {"enabled": "auto"},
                              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                                    "stage3_gather_16bit_weights_on_model_save": True}}}
    if parallel in ("fsdp1", "fsdp2"):
        return {"fsdp": "full_shard", "fsdp_config": {"version": int(parallel[-1]),
                                                      "transformer_layer_cls_to_wrap": [model_type_block]}}
    return {}


def wrapped_in(trainer) -> str:
    """What the trainer really wrapped the model in (accelerate may fall back without a word)."""
    wrapped = trainer.model_wrapped
    if type(wrapped).__name__ == "DeepSpeedEngine":
        return f"DeepSpeedEngine(zero{wrapped.zero_optimization_stage()})"
    from forgetmap.meter import parallelism

    kind, _ = parallelism(trainer.model)
    return type(wrapped).__name__ if kind == "local" else kind


def main(argv: list[str]) -> None:
    """One rank of a monitored fine-tune (`--parallel`: how it is sharded); rank 0 writes OUT/monitor.json."""
    import argparse

    import torch.distributed as dist

    from forgetmap.monitor import ForgettingMonitor

    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("map")
    parser.add_argument("out")
    parser.add_argument("--parallel", choices=PARALLEL, default="ddp")
    parser.add_argument("--trainer", choices=("hf", "trl"), default="hf")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--budget", type=float, default=None)
    parser.add_argument("--patience", type=int, default=1)
    parser.add_argument("--resume", default=None, help="a checkpoint of OUT to resume from")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--items", action="store_true", help="also watch meter_run's items (6 scored per check)")
    args = parser.parse_args(argv)
    monitor = ForgettingMonitor(args.map, budget=args.budget, patience=args.patience,
                                level=0.8 if args.budget is not None else None, items=watched_items(args.base) if args.items else None)
    from transformers import AutoConfig

    block = {"olmo2": "Olmo2DecoderLayer", "llama": "LlamaDecoderLayer"}[AutoConfig.from_pretrained(args.base).model_type]
    trainer = make_trainer(args.trainer, args.base, Path(args.out), monitor, max_steps=args.steps, bf16=False,
                           use_cpu=args.device == "cpu", **parallel_arguments(args.parallel, block))
    trainer.train(resume_from_checkpoint=args.resume)
    if dist.get_rank() == 0:
        (Path(args.out) / "monitor.json").write_text(json.dumps({
            "world": dist.get_world_size(), "wrapped": wrapped_in(trainer), "kind": monitor.meter.kind,
            "share": monitor.meter.share.tolist(), "repeats": monitor.meter.repeats, "baseline": monitor.baseline,
            "checks": monitor.checks, "global_step": trainer.state.global_step,
            "item_baseline": monitor.item_baseline, "item_known": monitor.item_known}))
    # the process group torn down before the interpreter exits: left to exit, a communication thread still running
    # (gloo's, DeepSpeed's) is destroyed unjoined and aborts the process ("terminate called without an active
    # exception"), now and then, after a run that succeeded
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
    # and the interpreter's own teardown skipped: with the group destroyed it still aborted once more at exit (a suite
    # run at 161be83, after rank 0 had written monitor.json), in the libraries' threads, never in what a test reads
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
