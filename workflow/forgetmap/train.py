"""The fine-tuning loop: load batch, forward, backward, step, log (full fine-tuning or LoRA).

Batches come from a batch source (`forgetmap.data.batches`): the loop draws each step's micro-batches
and never knows which examples they hold or how they were chosen. What counts in the loss arrives
with the encoded examples: their target tokens (chat examples: the response and closing EOS, the
paper's label masking; `lm` examples: every token but the first), less what a loss mask drops, each
scaled by its example's weight. The loss of one optimizer step is the (weighted) sum over the kept
target tokens of all its micro-batches divided by how many were kept, as one large batch would give.
AdamW with linear warm-up then linear decay to zero, gradient clipping, bf16 autocast and fused AdamW
on CUDA, optional gradient checkpointing. What a mitigation method changes beyond the batches (the
trained parameters, a loss term, the weights after each step and after training) arrives as hooks
(forgetmap.mitigation.hooks), never as flags inside the loop. `python -m forgetmap.train` is one FSDP worker.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .config import with_defaults
from .config.schema import FINETUNE
from .data.batches import IGNORE, collate
from .data.chat import Encoded
from .mitigation.hooks import Hook, Hooks
from .models import autocast_for, enable_checkpointing, is_flash, save_model
from .nll import head_reproduces_logits
from .data.packing import model_inputs

log = logging.getLogger(__name__)


def lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up over `warmup` steps, then linear decay to 0 at `total` (the paper's schedule)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def _world() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless torch.distributed is running."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def batch_loss(logits: torch.Tensor, batch: dict, n_targets: int) -> torch.Tensor:
    """Summed (weighted) next-token cross-entropy of a micro-batch's labels over the step's `n_targets`."""
    logits, labels = logits[:, :-1].float().flatten(0, 1), batch["labels"][:, 1:].flatten()
    if batch["weights"] is None:
        loss = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")
    else:
        per_token = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="none")
        loss = (per_token * batch["weights"][:, 1:].flatten()).sum()
    return loss / max(1, n_targets)


def kept_loss(model, batch: dict, n_targets: int) -> torch.Tensor:
    """`batch_loss` with only the positions that predict a kept label through the output head: the same
    loss without the full-vocabulary logits of every position (a prompt's, padding's), in fp32."""
    from .nll import transformer_body

    labels = batch["labels"][:, 1:]
    rows, cols = (labels != IGNORE).nonzero(as_tuple=True)
    hidden = transformer_body(model)(**model_inputs(batch))
    logits = model.get_output_embeddings()(hidden.last_hidden_state[rows, cols]).float()
    per_token = F.cross_entropy(logits, labels[rows, cols], reduction="none")
    if batch["weights"] is not None:
        per_token = per_token * batch["weights"][:, 1:][rows, cols]
    return per_token.sum() / max(1, n_targets)


def kept_positions_only(model, device: torch.device, world: int, autocast) -> bool:
    """Can training send only the kept positions through the output head (`kept_loss`)? On a GPU, in one
    process (under FSDP the root's hooks must run: the full forward), where the body and head alone
    reproduce the model's logits. The check runs under training's autocast: a model loaded with
    flash-attention keeps fp32 weights and runs its kernels, which take only fp16/bf16, inside it."""
    if device.type != "cuda" or world != 1:
        return False
    with autocast:
        return head_reproduces_logits(model, torch.arange(1, 9) % 4 + 1)


def train(model, batches: Iterator[list[list[Encoded]]], total: int, settings: dict, pad_id: int,
          log_path: Path | None, on_step: Callable[[int], dict] | None = None, hooks: Hook | None = None) -> dict:
    """Train `model` in place for `total` steps drawn from `batches` (each step: its micro-batches);
    one JSON line per optimizer step goes to `log_path`.

    Under torch.distributed (FSDP) every rank draws the same step's micro-batches (grad_accum x world
    of them) from the same source and runs its share; the loss is scaled by the world size because FSDP
    averages gradients over ranks, so a step's gradient is exactly the one-process gradient of all of
    them. Only rank 0 writes the log (`log_path` None on the others).

    A mitigation arm's `hooks` (forgetmap.mitigation.hooks) choose the trained parameters, add a loss term,
    and change the weights after each step and after training; the summary counts the tokens of every
    forward and backward pass and the peak memory, for the arms' cost table."""
    rank, world = _world()
    device = next(model.parameters()).device
    hooks = hooks if hooks is not None else Hooks()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    hooks.start(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings["lr"], betas=(0.9, 0.999),
                                  weight_decay=settings["weight_decay"],
                                  fused=device.type == "cuda")
    autocast = autocast_for(device, settings["bf16"])
    if checkpointing(model, settings, device):  # non-reentrant: works with LoRA's frozen inputs, any transformers
        enable_checkpointing(model)
    kept_only = not hooks.needs_logits and kept_positions_only(model, device, world, autocast)
    packed = settings.get("packing", False)  # the key is there only where a fine-tune packs (forgetmap.data.packing)
    model.train()
    started = time.perf_counter()
    step_log = StepLog(log_path)
    sum_tokens = 0
    for step in range(total):
        lr = lr_at(step, settings["lr"], settings["warmup_steps"], total)
        for group in optimizer.param_groups:
            group["lr"] = lr
        micro = next(batches)
        n_targets = sum(e.n_targets for mb in micro for e in mb)
        tokens = sum(len(e.ids) for mb in micro for e in mb)
        sum_tokens += tokens
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        mine = micro[rank::world]
        for mb in mine:  # under FSDP each backward reduce-scatters: gradients stay sharded (an unsynced
            # accumulation would hold every rank's full fp32 gradients: 28 GB at 7B, 52 GB at 13B)
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                     for k, v in collate(mb, pad_id, packed, flat=packed and is_flash(model)).items()}
            with autocast:
                if kept_only:
                    loss = kept_loss(model, batch, n_targets)
                else:
                    logits = model(**model_inputs(batch)).logits
                    loss = batch_loss(logits, batch, n_targets)
                    term = hooks.micro_loss(model, batch, logits, n_targets)
                    if term is not None:
                        loss = loss + term
            (loss * world).backward()
            loss_sum += loss.detach()
        if world > 1:
            dist.all_reduce(loss_sum)
        hooks.before_step(model)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, settings["max_grad_norm"])
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP
            grad_norm = grad_norm.full_tensor()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        hooks.after_step(model)
        line = {"step": step + 1, "loss": loss_sum, "lr": lr, "grad_norm": grad_norm, "tokens": tokens,
                "targets": n_targets, "tokens_per_s": None, "elapsed_s": round(time.perf_counter() - started, 3)}
        if on_step is not None:
            line.update(on_step(step + 1))
        step_log.add(line)
    last = step_log.close()
    facts = hooks.finish(model)
    model.eval()
    if not math.isfinite(last.get("loss", 0.0)):
        raise FloatingPointError(f"training diverged: loss {last['loss']} at step {last['step']}")
    return {"steps": total, "final_loss": last.get("loss"), "seconds": round(time.perf_counter() - started, 3),
            "tokens": sum_tokens, "forward_tokens": sum_tokens + hooks.extra_forward_tokens,
            "backward_tokens": sum_tokens, "peak_memory_mb": peak_memory_mb(device), **facts}


def checkpointing(model, settings: dict, device: torch.device) -> bool:
    """Gradient checkpointing as configured; `auto` (left to the job where the plan did not know the GPU's
    memory): on where forgetmap.memory's estimate of this fine-tune exceeds the GPU it got, said in the log."""
    setting = settings["gradient_checkpointing"]
    if setting != "auto":
        return bool(setting)
    if device.type != "cuda":
        return False
    from .anatomy import shape
    from .memory import GIB, fitted

    total = torch.cuda.get_device_properties(device).total_memory
    decided, need = fitted(shape(model.config), settings, True, total, settings.get("arm"))
    on = decided["gradient_checkpointing"]
    log.info("gradient checkpointing %s: the fine-tune needs %.1f GiB per process %s (forgetmap.memory) and the GPU "
             "has %.1f GiB", "on" if on else "off", need.device / GIB, "with it" if on else "without it", total / GIB)
    return on


def peak_memory_mb(device: torch.device) -> float:
    """The peak memory of training: on a GPU, what torch allocated since `train` began; on the CPU, the
    process's peak resident set so far (it includes what the job held before training)."""
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux reports KiB


class StepLog:
    """One JSON line per optimizer step, written in groups: a step's loss and gradient norm stay on the
    device until its group is written, so training never waits on the host (one sync per group);
    `tokens_per_s` is the group's rate. Only rank 0 writes (`path` None elsewhere)."""

    EVERY = 10

    def __init__(self, path: Path | None):
        self.sink = open(path, "w") if path is not None else None
        self.pending: list[dict] = []
        self.started, self.tokens, self.last = time.perf_counter(), 0, {}

    def add(self, line: dict) -> None:
        self.pending.append(line)
        self.tokens += line["tokens"]
        if len(self.pending) == self.EVERY:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        values = torch.stack([torch.stack([line["loss"].double(), line["grad_norm"].double()])
                              for line in self.pending]).cpu().tolist()  # the group's one host sync
        rate = round(self.tokens / max(time.perf_counter() - self.started, 1e-9), 1)
        for line, (loss, norm) in zip(self.pending, values):
            line.update(loss=round(loss, 6), grad_norm=round(norm, 6), tokens_per_s=rate)
            if self.sink is not None:
                self.sink.write(json.dumps(line) + "\n")
        if self.sink is not None:
            self.sink.flush()
        self.last = self.pending[-1]
        self.pending, self.started, self.tokens = [], time.perf_counter(), 0

    def close(self) -> dict:
        """Write what is pending; the last step's line."""
        self.flush()
        if self.sink is not None:
            self.sink.close()
        return self.last


def attach_lora(model, lora: dict, seed: int):
    from peft import LoraConfig, get_peft_model

    from .models import peft_quietly

    torch.manual_seed(seed)
    config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                        target_modules=lora["target_modules"], task_type="CAUSAL_LM")
    with peft_quietly():
        return get_peft_model(model, config)


def finetune(base: str, task: str, settings: dict, threads: int, out: str, replay: str | None = None,
             token_losses: str | None = None, matrix: str | None = None, split: str | None = None,
             heldout: str | None = None, shards: list[str] | None = None, probes: str | None = None) -> dict:
    """Fine-tune the base model on a task's training split; write the checkpoint whole or not at all.
    With `processes` above 1, torchrun runs that many FSDP workers (`python -m forgetmap.train`) into
    the temporary directory, one per GPU (the devices this job claimed) or, on CPU, with gloo. A mitigation
    arm (`settings["arm"]`) adds its replayed examples and the base model's token losses; a monitored
    fine-tune (`settings["monitor"]`) scores the forecast's `probes` as it trains (forgetmap.monitor.trajectory)."""
    from .io import atomic_path

    settings = with_defaults(FINETUNE, settings)  # a partial dict (a direct call) gets the config's defaults
    processes = settings["processes"]
    with atomic_path(out, directory=True) as tmp:
        if processes == 1:
            online = {"matrix": matrix, "split": split, "heldout": heldout, "shards": shards} if matrix else None
            return finetune_into(base, task, tmp, settings, threads, replay, token_losses, online, probes, shards)
        import subprocess
        import sys

        from .errors import ForgetmapError

        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   "-m", "forgetmap.train", "--base", str(base), "--task", str(task),
                   "--settings", json.dumps(settings), "--threads", str(max(1, threads // processes)),
                   "--into", str(tmp)]
        command += [a for flag, path in (("--replay", replay), ("--token-losses", token_losses), ("--probes", probes))
                    if path for a in (flag, str(path))]
        if shards and settings.get("monitor", {}).get("items"):  # the corpus's items a monitored fine-tune watches
            command += ["--shards", *map(str, shards)]
        log.info("launching %d FSDP training processes: %s", processes, " ".join(command[:6]))
        done = subprocess.run(command)
        if done.returncode != 0:
            raise ForgetmapError(f"distributed fine-tuning ({processes} processes) failed with exit code "
                                 f"{done.returncode}; the workers' errors are above in this log")
        return json.loads((tmp / "train_summary.json").read_text())


def finetune_into(base_dir: str, task_path: str, into: Path, settings: dict, threads: int,
                  replay: str | None = None, token_losses: str | None = None, online: dict | None = None,
                  probes: str | None = None, shards: list[str] | None = None) -> dict:
    """The fine-tune itself, writing into `into`; under torch.distributed, one FSDP rank of it."""
    from .mitigation.arms import arm_batches
    from .mitigation.knobs import arm_hooks
    from .data.tasks import training_examples
    from .data.chat import truncation
    from .models import (load_model, load_tokenizer, n_parameters, pick_attention, pick_device, set_threads,
                         tokenizer_choices, write_pointer)

    into = Path(into)
    set_threads(threads)
    torch.manual_seed(settings["seed"])
    rank, world = _world()
    device = pick_device(settings["device"])
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    tokenizer = load_tokenizer(base_dir)
    # weights stay fp32 for training; bf16 comes from autocast, as the paper's HF Trainer bf16 runs, and
    # flash-attention 2 (which needs half precision) runs inside that autocast; under FSDP the blocks are
    # also gathered in bf16 (its mixed-precision policy), so no unsharded copy outlives its block
    compute_dtype = torch.bfloat16 if device.type == "cuda" and settings["bf16"] else torch.float32
    attention = pick_attention(settings["attention"], device, compute_dtype)
    examples = training_examples(tokenizer, task_path, settings["chat_template"], settings["max_length"])
    if world > 1:  # FSDP: each rank reads its own rows; bf16 on a GPU is FSDP's policy over fp32 shards
        from .sharded import load_sharded

        model, parameters, architecture = load_sharded(base_dir, device, attention, rank, world,
                                                       compute_dtype == torch.bfloat16)
    else:
        model = load_model(base_dir, device, torch.float32, attention)
        if settings["method"] == "lora":
            model = attach_lora(model, settings["lora"], settings["seed"])
        parameters, architecture = n_parameters(model), type(model).__name__
    batches, steps, arm_summary = arm_batches(settings, tokenizer, examples, world, replay, token_losses, model,
                                              online, task_path)
    checks = []
    if settings.get("monitor") and probes:  # the probes on the live weights (under FSDP, every rank in step)
        from .models import autocast_for
        from .monitor.trajectory import ProbeChecks, check_steps

        checks.append(ProbeChecks(model, tokenizer, probes, settings["monitor"], steps,
                                  lambda: autocast_for(device, settings["bf16"])))
        if settings["monitor"].get("items") and shards:  # and k of the corpus's multiple-choice items
            from .monitor.item_trajectory import ItemChecks

            checks.append(ItemChecks(model, tokenizer, shards, settings["monitor"]["items"],
                                     check_steps(settings["monitor"], steps), lambda: autocast_for(device, settings["bf16"])))

    def on_step(step: int) -> dict:
        return {key: value for check in checks for key, value in check.on_step(step).items()}

    summary = train(model, batches, steps, settings, tokenizer.pad_token_id,
                    into / "train_log.jsonl" if rank == 0 else None, hooks=arm_hooks(settings),
                    on_step=on_step if checks else None)
    summary.update(arm_summary)
    for check in checks:
        summary.update(check.write(into if rank == 0 else None))
    if world > 1:  # every rank gathers each weight in turn; rank 0 writes them file by file
        from .sharded import save_sharded

        save_sharded(model, into, architecture, rank)
    elif rank == 0:
        save_model(model, into)
    if rank == 0:
        if settings["method"] == "lora":
            write_pointer(into, str(base_dir))
        tokenizer.save_pretrained(into)
        summary.update(examples=len(examples), parameters=parameters, device=str(device), processes=world,
                       **truncation(examples, settings["max_length"], "training examples"),
                       **tokenizer_choices(tokenizer, settings["chat_template"]))
        (into / "train_summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def worker_main(argv: list[str] | None = None) -> int:
    """One FSDP rank of a multi-process fine-tune, as torchrun starts it (`finetune` launches it)."""
    import argparse
    import sys

    from .models import pick_device

    parser = argparse.ArgumentParser(prog="python -m forgetmap.train", description=worker_main.__doc__)
    parser.add_argument("--base", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--settings", type=json.loads, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--into", required=True, help="directory rank 0 writes the checkpoint into")
    parser.add_argument("--replay", default=None)
    parser.add_argument("--token-losses", default=None)
    parser.add_argument("--probes", default=None, help="a monitored fine-tune's probes (finetune.monitor)")
    parser.add_argument("--shards", nargs="+", default=None, help="a monitored fine-tune's corpus, for its items")
    args = parser.parse_args(argv)
    from .errors import LOG_FORMAT

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)  # as every job logs
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from datetime import timedelta

    dist.init_process_group("nccl" if pick_device(args.settings["device"]).type == "cuda" else "gloo",
                            timeout=timedelta(minutes=args.settings["process_group_timeout"]))
    try:
        summary = finetune_into(args.base, args.task, Path(args.into), args.settings, args.threads, args.replay,
                                args.token_losses, probes=args.probes, shards=args.shards)
        dist.barrier()  # rank 0 has written the checkpoint
        if dist.get_rank() == 0:
            print(json.dumps({"command": "finetune-worker", **summary}))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
