"""The forgetting monitor in OLMo-core's own `Trainer`, for the OLMo-core tests: run with the python of OLMo-core's
virtualenv (tests/olmocore_env.py), `python olmocore_run.py ROOT` (or under torchrun, `--fsdp`: each rank one of a
data-parallel run, OLMo-core's FSDP2 over gloo). Under ROOT it makes the monitor tests' OLMo-2 stand-in and its map
(monitor_run.monitored_base; a sharded run reuses them), loads the stand-in's weights into an OLMo-core
`Transformer` (OLMo-core's own converter) and trains it from token files with the callback built from
`ForgettingMonitorConfig`:

- `budget`: a budget every check exceeds: the run stops at the first check;
- `first` then `resumed`, watching `quiz`'s items too (every one at every check): a run of 4 steps, then the same
  save folder trained on to 6 (OLMo-core loads the step-4 checkpoint and with it the monitor's state); under
  torchrun the first alone;

then scores the same examples through transformers on the weights OLMo-core ended with (converted back) and writes
what each held to ROOT/result.json (sharded: result-fsdp.json; rank 0)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from monitor_run import MAX_LENGTH, monitored_base, quiz_frame
from standins import sentences

EVERY, STEPS, RESUMED = 2, 4, 6
N_ITEMS = 12
SETTINGS = {"target_delimiter": " ", "chat_template": "auto", "shots": 0, "metric": "acc", "token_budget": 4096}


def quiz(tokenizer):
    """Twelve multiple-choice items of three options (a corpus's items, as the workflow asks them)."""
    from forgetmap.correctness.benchmark import from_frame

    frame = quiz_frame(N_ITEMS).assign(source="quiz", kind="lm")
    return from_frame(frame, tokenizer, SETTINGS, "the quiz")


WATCH = {"items": quiz, "k": N_ITEMS}  # no item map: every item scored, the naive rates


def olmo_core_model(base: Path):
    """An OLMo-core OLMo-2 `Transformer` of the stand-in's widths (its weights: `load_base`)."""
    from olmo_core.nn.feed_forward import FeedForwardConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    cfg = json.loads((base / "config.json").read_text())
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta") or 10000
    config = TransformerConfig.llama_like(
        d_model=cfg["hidden_size"], vocab_size=cfg["vocab_size"], n_layers=cfg["num_hidden_layers"],
        n_heads=cfg["num_attention_heads"], n_kv_heads=cfg["num_key_value_heads"], qk_norm=True,
        layer_norm_eps=cfg["rms_norm_eps"], rope_theta=int(theta), block_name=TransformerBlockType.reordered_norm,
        feed_forward=FeedForwardConfig(hidden_size=cfg["intermediate_size"], bias=False))
    return config.build(init_device="cpu")


def load_base(model, base: Path) -> None:
    """The stand-in's weights into the train module's model (which initialised its own: OLMo-core's converter)."""
    from olmo_core.nn.hf.checkpoint import load_hf_model

    state = model.state_dict()
    load_hf_model(str(base), state)
    model.load_state_dict(state)


def token_file(root: Path, tokenizer) -> Path:
    ids = []
    for text in sentences(300, seed=5):
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    path = root / "tokens.npy"
    np.asarray(ids, dtype=np.uint16).tofile(path)  # OLMo-core's token files: raw arrays
    return path


class Metrics:
    """Every `forget/` metric OLMo-core logs, by step (what its loggers receive)."""

    def __new__(cls):
        from olmo_core.train.callbacks import Callback

        class Collect(Callback):
            seen: dict = {}

            def log_metrics(self, step, metrics):
                found = {k: float(v) for k, v in metrics.items() if k.startswith("forget/")}
                if found:
                    Collect.seen.setdefault(step, {}).update(found)
        return Collect()


def fit(root: Path, base: Path, map_path: Path, tokens: Path, save: str, steps: int, fsdp: bool, **monitor) -> dict:
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.optim import AdamWConfig
    from olmo_core.train import Duration, TrainerConfig
    from olmo_core.train.callbacks import CheckpointerCallback
    from olmo_core.train.train_module import TransformerDataParallelConfig, TransformerTrainModuleConfig
    from olmo_core.config import DType
    from olmo_core.distributed.parallel import DataParallelType
    from transformers import AutoTokenizer

    from forgetmap.monitor.olmocore import ForgettingMonitorConfig

    tok = AutoTokenizer.from_pretrained(base)
    sequence = 32
    dataset = NumpyFSLDatasetConfig(
        tokenizer=TokenizerConfig(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        paths=[str(tokens)], sequence_length=sequence, work_dir=str(root / "dataset")).build()
    loader = NumpyDataLoaderConfig(global_batch_size=8 * sequence, seed=0,
                                   work_dir=str(root / "dataset")).build(dataset)
    dp = TransformerDataParallelConfig(name=DataParallelType.fsdp, param_dtype=DType.float32,
                                       reduce_dtype=DType.float32) if fsdp else None
    module = TransformerTrainModuleConfig(rank_microbatch_size=4 * sequence, max_sequence_length=sequence,
                                          optim=AdamWConfig(lr=2e-2), dp_config=dp).build(olmo_core_model(base))
    load_base(module.model, base)
    metrics = Metrics()
    config = TrainerConfig(save_folder=save, max_duration=Duration.steps(steps), metrics_collect_interval=1,
                           save_overwrite=True, callbacks={
                               # a synchronous save: OLMo-core's async one hangs a gloo run at its end now and then
                               # (docs/monitor.md)
                               "checkpointer": CheckpointerCallback(save_interval=STEPS, ephemeral_save_interval=None,
                                                                    save_async=False),
                               "collect": metrics,
                               "forgetmap": ForgettingMonitorConfig(tokenizer=str(base), map=str(map_path),
                                                                    every=EVERY, **monitor)})
    trainer = config.build(module, loader)
    trainer.fit()
    monitor = trainer.callbacks["forgetmap"].monitor
    return {"step": trainer.global_step, "baseline": monitor.baseline, "checks": monitor.checks,
            "item_baseline": monitor.item_baseline,
            "metrics": {str(k): v for k, v in type(metrics).seen.items()}, "work_dir": str(trainer.work_dir),
            "weights": {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                        for k, v in trainer.train_module.model.state_dict().items()}}


def transformers_values(base: Path, map_path: Path, weights: dict) -> dict:
    """The map's probes and audit examples scored as the transformers callback scores them, on the base and on
    `weights` (OLMo-core's state converted to Hugging Face's)."""
    from olmo_core.nn.hf.convert import convert_state_to_hf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.meter import OptionMeter, ProbeMeter
    from forgetmap.monitor import ForecastMap

    forecast_map = ForecastMap.read(map_path)
    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = forecast_map.measured_rows()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    before = ProbeMeter.for_rows(model, tokenizer, rows, "auto", MAX_LENGTH).measure()
    benchmark = quiz(tokenizer)
    items_before = OptionMeter.for_items(model, tokenizer, benchmark).measure()
    model.load_state_dict(convert_state_to_hf(model.config, weights))
    after = ProbeMeter.for_rows(model, tokenizer, rows, "auto", MAX_LENGTH).measure()
    items_after = OptionMeter.for_items(model, tokenizer, benchmark).measure()
    return {"baseline": before.tolist(), "change": (after - before).tolist(),
            "items_before": benchmark.decide(items_before).tolist(),
            "items_after": benchmark.decide(items_after).tolist(),
            "options": [len(item.options) for item in benchmark.items]}


def refused(map_path: Path) -> list[str]:
    """What the callback's config says of settings it cannot run with, before any training."""
    from forgetmap.monitor.olmocore import ForgettingMonitorConfig

    said = []
    for bad in ({"map": str(map_path)}, {"map": str(map_path), "tokenizer": "t", "every": 0},
                {"map": str(map_path), "tokenizer": "t", "patience": 0}):
        try:
            ForgettingMonitorConfig(**bad).build(None)
        except ValueError as exc:
            said.append(str(exc))
    return said


def through_config_system(map_path: Path) -> dict:
    """The callback's config as OLMo-core's config system holds a trainer's: serialised with its class, read back,
    and a field overridden from the command line's dotted form."""
    from olmo_core.train import TrainerConfig

    from forgetmap.monitor.olmocore import ForgettingMonitorConfig

    config = ForgettingMonitorConfig(tokenizer="t", map=str(map_path), every=50, budget=0.1,
                                     items={"items": "arc_easy", "k": 30})
    trainer = TrainerConfig(save_folder="unused", callbacks={"forgetmap": config})
    held = trainer.as_config_dict()["callbacks"]["forgetmap"]
    return {"class": held["_CLASS_"], "same": ForgettingMonitorConfig.from_dict(held) == config,
            "budget": trainer.merge(["--callbacks.forgetmap.budget=0.2"]).callbacks["forgetmap"].budget}


def main() -> None:
    """One process: the budget's run, then the first run and its resume. Under torchrun (`--fsdp`): the first run
    alone (OLMo-core builds its device mesh once per process, so a resume is another process's)."""
    root = Path(sys.argv[1])
    fsdp = "--fsdp" in sys.argv
    if fsdp:
        from olmo_core.distributed.utils import init_distributed

        init_distributed(backend="gloo")
    rank = torch.distributed.get_rank() if fsdp else 0
    torch.set_num_threads(1)
    base, map_path = root / "base", root / "map.parquet"
    if rank == 0 and not map_path.exists():  # the sharded run reuses the one-process run's
        monitored_base(root)
        from transformers import AutoTokenizer

        token_file(root, AutoTokenizer.from_pretrained(base))
    if fsdp:
        torch.distributed.barrier()
    tokens = root / "tokens.npy"
    if fsdp:
        result = {"first": fit(root, base, map_path, tokens, str(root / "fsdp"), STEPS, fsdp)}
    else:
        result = {"refused": refused(map_path), "config": through_config_system(map_path),
                  "budget": fit(root, base, map_path, tokens, str(root / "budget"), RESUMED, fsdp, budget=-1.0),
                  "first": fit(root, base, map_path, tokens, str(root / "run"), STEPS, fsdp, items=WATCH),
                  "resumed": fit(root, base, map_path, tokens, str(root / "run"), RESUMED, fsdp, items=WATCH)}
    if fsdp:  # the transformers path below is one process's
        torch.distributed.destroy_process_group()
    if rank == 0:
        last = result["first" if fsdp else "resumed"]
        result["transformers"] = transformers_values(base, map_path, last["weights"])
        for run in ("budget", "first", "resumed"):
            result.get(run, {}).pop("weights", None)
        (root / ("result-fsdp.json" if fsdp else "result.json")).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
