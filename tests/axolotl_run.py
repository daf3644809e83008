"""The forgetting monitor as an Axolotl plugin, for the Axolotl tests: run with the python of Axolotl's virtualenv
(tests/axolotl_env.py), `python axolotl_run.py ROOT`. Under ROOT it makes the monitor tests' OLMo-2 stand-in and its
map (monitor_run.monitored_base), a quiz of 12 multiple-choice items as an lm-eval task YAML and a completion
dataset, then

- runs `axolotl train` (Axolotl's own command) on a config naming the plugin and a `forgetmap:` block that watches the
  map's probes and audit examples and the quiz's items every 2 steps: 4 steps, saving at 2 and 4, its scalars to
  Axolotl's TensorBoard logger;
- runs it again from the step-4 checkpoint (`resume_from_checkpoint`) with a budget every check exceeds, towards 8
  steps: the monitor's state comes back from the checkpoint, and the run saves and stops at the first check, 6;
- validates configs with bad `forgetmap:` blocks through Axolotl's own config loader (what `axolotl train` calls);
- scores the same examples and items with the same monitor in a plain transformers `Trainer` (no step taken: a
  learning rate of 0) on the base and on the weights Axolotl saved at step 6;

and writes what each held to ROOT/result.json."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from evals import LM_EVAL_TASK
from monitor_run import make_trainer, monitored_base, quiz_frame
from standins import sentences

EVERY, STEPS, RESUMED_TO, STOPPED = 2, 4, 8, 6
N_ITEMS = 12


def quiz_task(directory: Path) -> Path:
    """Twelve three-option items as an lm-eval task (`bench_mc`) in `directory`: Axolotl's YAML names tasks."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "quiz.jsonl"
    quiz_frame(N_ITEMS).to_json(data, orient="records", lines=True)
    (directory / "bench_mc.yaml").write_text(LM_EVAL_TASK.format(items=data))
    return directory


def config(root: Path, **changes) -> dict:
    """An Axolotl config of a tiny completion fine-tune of the stand-in on the CPU in fp32, with the plugin."""
    data = root / "train.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"text": t.upper()}) + "\n" for t in sentences(48, seed=21)))
    settings = {
        "base_model": str(root / "base"), "datasets": [{"path": str(data), "ds_type": "json", "type": "completion"}],
        "dataset_prepared_path": str(root / "prepared"), "val_set_size": 0, "sequence_len": 64,
        "micro_batch_size": 4, "gradient_accumulation_steps": 1, "num_epochs": 1, "max_steps": STEPS,
        "learning_rate": 0.003, "optimizer": "adamw_torch", "lr_scheduler": "constant", "seed": 0,
        "bf16": False, "fp16": False, "tf32": False, "save_steps": EVERY, "logging_steps": 1,
        "output_dir": str(root / "out"), "use_tensorboard": True,
        "plugins": ["forgetmap.monitor.axolotl.ForgettingMonitorPlugin"],
        "forgetmap": {"map": str(root / "map.parquet"), "every": EVERY,
                      "items": {"task": "bench_mc", "k": N_ITEMS, "lm_eval": {"include_path": str(root / "tasks")}}}}
    settings.update(changes)
    return settings


def axolotl_train(root: Path, name: str, settings: dict) -> None:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(settings))
    bin_dir = str(Path(sys.executable).parent)  # the virtualenv's `axolotl` and the `accelerate` it launches
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "AXOLOTL_DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([os.path.join(bin_dir, "axolotl"), "train", str(path)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    (root / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode:
        said = (proc.stdout + proc.stderr)[-4000:]
        raise SystemExit(f"axolotl train {name}.yaml failed ({proc.returncode}):\n{said}")


def refused(root: Path) -> dict:
    """What Axolotl's config loader says of bad `forgetmap:` blocks (the first line naming the key)."""
    from axolotl.cli.config import load_cfg

    good = config(root)
    block = good["forgetmap"]
    bad = {"unknown key": {**block, "budgett": 0.1},
           "unknown item key": {**block, "items": {**block["items"], "kk": 3}},
           "unknown lm_eval key": {**block, "items": {**block["items"], "lm_eval": {"num_fewshots": 2}}},
           "wrong kind": {**block, "every": "often"},
           "out of range": {**block, "patience": 0},
           "no check": {k: v for k, v in block.items() if k != "every"},
           "no map": {**block, "map": str(root / "absent.parquet")},
           "no item map": {**block, "items": {**block["items"], "map": str(root / "absent-items.parquet")}}}
    said = {}
    for name, value in {**bad, "no block": None}.items():
        settings = dict(good, forgetmap=value) if value is not None else \
            {k: v for k, v in good.items() if k != "forgetmap"}
        path = root / "refused.yaml"
        path.write_text(yaml.safe_dump(settings))
        try:
            load_cfg(str(path))
            said[name] = None
        except Exception as exc:  # pydantic's ValidationError, as Axolotl raises it for its own keys
            said[name] = str(exc)
    return said


def plain_trainer(root: Path, weights: Path, name: str, base_tolerance) -> dict:
    """The same monitor (the block's settings) in a plain transformers `Trainer` on `weights`, no step taken."""
    from forgetmap.monitor.axolotl import ForgettingMonitorSettings

    settings = ForgettingMonitorSettings(**{**config(root)["forgetmap"], "every": 1, "base_tolerance": base_tolerance})
    monitor = settings.monitor()
    trainer = make_trainer("trainer", weights, root / name, monitor, max_steps=1, learning_rate=0.0)
    trainer.train()
    return {"baseline": monitor.baseline, "item_baseline": monitor.item_baseline,
            "options": [len(item.options) for item in monitor.items.benchmark.items]}


def logged(out: Path) -> dict:
    """The `forget` scalars Axolotl's TensorBoard logger wrote, by tag and step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict = {}
    for events in glob.glob(str(out / "runs" / "**" / "events.out.tfevents.*"), recursive=True):
        accumulator = EventAccumulator(events)
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            if "forget" in tag:
                for event in accumulator.Scalars(tag):
                    found.setdefault(tag, {})[str(event.step)] = event.value
    return found


def monitor_state(checkpoint: Path) -> dict:
    """The monitor's state as the trainer saved it with the checkpoint."""
    from forgetmap.monitor.callback import checkpointed

    return checkpointed(json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"])


def main() -> None:
    root = Path(sys.argv[1])
    monitored_base(root)
    quiz_task(root / "tasks")
    result = {"refused": refused(root)}
    axolotl_train(root, "first", config(root))
    out = root / "out"
    result["first"] = monitor_state(out / f"checkpoint-{STEPS}")
    resumed = config(root, max_steps=RESUMED_TO, save_steps=100,
                     resume_from_checkpoint=str(out / f"checkpoint-{STEPS}"))
    resumed["forgetmap"]["budget"] = -1.0
    axolotl_train(root, "resumed", resumed)
    result["checkpoints"] = sorted(p.name for p in out.glob("checkpoint-*"))
    result["resumed"] = monitor_state(out / f"checkpoint-{STOPPED}")
    result["logged"] = logged(out)
    result["plain_base"] = plain_trainer(root, root / "base", "plain-base", 0.01)
    result["plain_final"] = plain_trainer(root, out / f"checkpoint-{STOPPED}", "plain-final", None)
    (root / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
