"""A tiny fine-tune with the forgetting monitor attached, for the monitor's tests; run under torchrun
(`python -m torch.distributed.run --nproc_per_node=2 monitor_run.py BASE MAP OUT`) it is one rank of a data-parallel
run over gloo, and rank 0 writes what the monitor held (`OUT/monitor.json`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from standins import sentences

MAX_LENGTH = 64


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
    common = dict(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=4, learning_rate=5e-3,
                  eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2, logging_steps=1,
                  report_to="none", use_cpu=True, disable_tqdm=True, seed=0, **extra)
    if kind == "trl":
        from trl import SFTConfig, SFTTrainer

        data = Dataset.from_dict({"text": texts})
        trainer = SFTTrainer(model=model, args=SFTConfig(max_length=MAX_LENGTH, packing=packing, **common),
                             train_dataset=data.select(range(40)), eval_dataset=data.select(range(40, 48)),
                             processing_class=tokenizer)
    else:
        from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

        data = Dataset.from_dict(dict(tokenizer(texts, truncation=True, max_length=MAX_LENGTH)))
        trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=data.select(range(40)),
                          eval_dataset=data.select(range(40, 48)), processing_class=tokenizer,
                          data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    if monitor is not None:
        monitor.attach(trainer)
    return trainer


if __name__ == "__main__":
    import torch.distributed as dist

    from forgetmap.monitor import ForgettingMonitor

    base, forecast_map, out = sys.argv[1:4]
    monitor = ForgettingMonitor(forecast_map)
    trainer = make_trainer("hf", base, Path(out), monitor, max_steps=2)
    trainer.train()
    if dist.get_rank() == 0:
        (Path(out) / "monitor.json").write_text(json.dumps({
            "world": dist.get_world_size(), "share": monitor.meter.share.tolist(), "baseline": monitor.baseline,
            "checks": monitor.checks}))
