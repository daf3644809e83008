"""Real evaluation-harness runs on tiny stand-ins, offline and on CPU: the logs users bring.

- lm-evaluation-harness: its `lm_eval` command with a task YAML over a local jsonl (`--log_samples`).
- LightEval: its Pipeline with a custom task over a local dataset (`save_details`). LightEval 0.13's task
  registry imports every built-in task module, and one of them (tiny_benchmarks) downloads a pickle at
  import; offline, the runner registers the custom task alone. Everything else (the model's log-likelihoods,
  the metric, the details parquet) is LightEval's own code. LightEval 0.13 hashes `str` with xxhash, which
  xxhash 4 refuses: the `evals` extra keeps xxhash below 4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

LM_EVAL_TASK = """task: bench_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{prompt}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{choices.index(answer)}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
"""

LIGHTEVAL_TASK = '''from lighteval.metrics.metrics import Metrics
from lighteval.tasks.lighteval_task import LightevalTaskConfig
from lighteval.tasks.requests import Doc


def prompt(line, task_name=None):
    return Doc(task_name=task_name, query=line["prompt"], choices=[" " + c for c in line["choices"]],
               gold_index=line["choices"].index(line["answer"]), id=line["example_id"])


TASKS_TABLE = [LightevalTaskConfig(name="bench_mc", prompt_function=prompt, hf_repo={data!r}, hf_subset="default",
                                   metrics=[Metrics.loglikelihood_acc], hf_avail_splits=["test"],
                                   evaluation_splits=["test"])]
'''

LIGHTEVAL_RUNNER = '''import sys

from lighteval.tasks.registry import Registry


def only_custom(custom_tasks=None, load_multilingual=False):
    return Registry._extract_configs(Registry.create_custom_tasks_module(custom_tasks))


Registry.load_all_task_configs = staticmethod(only_custom)

from lighteval.logging.evaluation_tracker import EvaluationTracker  # noqa: E402
from lighteval.models.transformers.transformers_model import TransformersModelConfig  # noqa: E402
from lighteval.pipeline import ParallelismManager, Pipeline, PipelineParameters  # noqa: E402

model_dir, tasks_file, out = sys.argv[1:4]
pipeline = Pipeline(tasks="bench_mc|0", evaluation_tracker=EvaluationTracker(output_dir=out, save_details=True),
                    pipeline_parameters=PipelineParameters(launcher_type=ParallelismManager.ACCELERATE,
                                                           custom_tasks_directory=tasks_file),
                    model_config=TransformersModelConfig(model_name=model_dir, dtype="float32"))
pipeline.evaluate()
pipeline.save_and_push_results()
'''

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _items(items: pd.DataFrame, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "test.jsonl"
    items[["example_id", "prompt", "choices", "answer"]].to_json(path, orient="records", lines=True)
    return path


def run_lm_eval(model_dir, items: pd.DataFrame, out, chat_template: bool = False) -> list[Path]:
    """lm-evaluation-harness on the items (multiple choice, acc): its samples_*.jsonl files; with
    `chat_template`, each question asked through the model's chat template (`--apply_chat_template`)."""
    out = Path(out)
    data = _items(items, out / "data")
    (out / "bench_mc.yaml").write_text(LM_EVAL_TASK.format(items=data))
    _run([str(Path(sys.executable).parent / "lm_eval"), "--model", "hf", "--model_args",
          f"pretrained={model_dir},dtype=float32", "--tasks", "bench_mc", "--include_path", str(out),
          "--output_path", str(out / "results"), "--log_samples", "--device", "cpu", "--batch_size", "4",
          *["--apply_chat_template"] * chat_template], out)
    return sorted((out / "results").rglob("samples_bench_mc_*.jsonl"))


def run_lighteval(model_dir, items: pd.DataFrame, out) -> list[Path]:
    """LightEval on the items (multiple choice, loglikelihood acc): its details_*.parquet files."""
    out = Path(out)
    data = _items(items, out / "data")
    (out / "tasks.py").write_text(LIGHTEVAL_TASK.format(data=str(data.parent)))
    (out / "runner.py").write_text(LIGHTEVAL_RUNNER)
    _run([sys.executable, str(out / "runner.py"), str(model_dir), str(out / "tasks.py"), str(out / "results")], out)
    return sorted((out / "results").rglob("details_*.parquet"))
