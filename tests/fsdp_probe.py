"""One FSDP rank (torchrun, gloo) that loads a checkpoint sharded, saves it back file by file, and records
the host memory each step held above where it began (tests/unit/test_sharded.py runs two of it); or, given a
task and fine-tuning settings, trains on it and records the training's peak (tests/unit/test_memory.py)."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))

from peaks import peak_bytes  # noqa: E402

from forgetmap.sharded import load_sharded, save_sharded  # noqa: E402


def main(base: str, into: str, max_file_bytes: int, results: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    import gc

    warm, _, _ = load_sharded(base, torch.device("cpu"), "sdpa", rank, world)  # imports and caches, first
    del warm
    gc.collect()
    with peak_bytes() as loading:
        model, _, architecture = load_sharded(base, torch.device("cpu"), "sdpa", rank, world)
    dist.barrier()
    with peak_bytes() as saving:
        save_sharded(model, Path(into), architecture, rank, max_file_bytes)
    Path(f"{results}.{rank}").write_text(json.dumps({"load": loading["peak"], "save": saving["peak"]}))
    dist.destroy_process_group()


def trained(base: str, task: str, settings: str, results: str) -> None:
    """The peak bytes this rank holds while FSDP loads the base and trains two steps (the tensors of the
    training: its shards, gradients, Adam states, gathered blocks, activations), above where loading began."""
    from forgetmap.data.tasks import training_examples
    from forgetmap.mitigation.arms import arm_batches
    from forgetmap.models import load_tokenizer
    from forgetmap.train import train

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    settings = json.loads(settings)
    tokenizer = load_tokenizer(base)
    examples = training_examples(tokenizer, task, settings["chat_template"], settings["max_length"])
    warm, _, _ = load_sharded(base, torch.device("cpu"), "sdpa", rank, world)  # imports and caches, first
    del warm
    with peak_bytes() as found:
        model, _, _ = load_sharded(base, torch.device("cpu"), "sdpa", rank, world)
        batches, steps, _ = arm_batches(settings, tokenizer, examples, world)
        train(model, batches, steps, settings, tokenizer.pad_token_id, None)
    Path(f"{results}.{rank}").write_text(json.dumps({"train": found["peak"]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "train":
        trained(*sys.argv[2:6])
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
