"""Early forecast (issue 22's stretch, measured before it is offered): how well do the k probes of a
checkpoint saved part-way through fine-tuning forecast the task's final row?

After the demo, each `check` task is fine-tuned again in this process exactly as its matrix fine-tune
(same settings, seed and schedule); at each fraction of the steps the forecast's probes are scored, and
the row is completed as the forecast job does (mf fitted on the fit tasks, from the same probes). Each
forecast is compared with the task's measured final row over the examples that are not probes. The
fraction 1.0 repeats the forecast job in-process (a check that the two agree).

    python benchmarks/early_forecast.py --workdir .   # after the demo
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from forgetmap.config import with_defaults
from forgetmap.config.schema import FINETUNE
from forgetmap.data.chat import encode_examples
from forgetmap.data.tasks import training_examples
from forgetmap.io import read_metadata
from forgetmap.matrix import ForgettingMatrix
from forgetmap.mitigation.arms import arm_batches
from forgetmap.models import load_model, load_tokenizer, set_threads
from forgetmap.nll import TorchScorer
from forgetmap.plan import Plan
from forgetmap.predict.forecast import complete, fit_rows
from forgetmap.predict.metrics import evaluate
from forgetmap.train import train


def early(workdir: Path, model_name: str, fractions: list[float]) -> pd.DataFrame:
    plan = Plan(yaml.safe_load((workdir / "config/config.yaml").read_text()))
    matrix = ForgettingMatrix.read(workdir / f"results/{model_name}/forgetting.parquet")
    probes = workdir / f"results/{model_name}/forecast/probes.parquet"
    index = np.asarray(read_metadata(probes)["indices"])
    fit = plan.forecast.fit_tasks(model_name)
    rows, usable = fit_rows(matrix, fit, "matrix")
    known = np.searchsorted(usable, index)
    score = plan.score_settings(model_name)
    forecast = plan.cfg["forecast"]
    params = plan.cfg["prediction"]["methods"][forecast["method"]]
    base = workdir / f"results/{model_name}/base"
    tokenizer = load_tokenizer(base)
    probe_examples = encode_examples(tokenizer, pd.read_parquet(probes), score["chat_template"], score["max_length"])
    out = []
    for task, mode in plan.forecast.modes(model_name).items():
        if mode != "check":
            continue
        settings = with_defaults(FINETUNE, plan.finetune_settings(model_name, task))
        torch.manual_seed(settings["seed"])
        model = load_model(base, torch.device("cpu"), torch.float32)
        examples = training_examples(tokenizer, str(workdir / f"results/data/tasks/{task}.parquet"),
                                     settings["chat_template"], settings["max_length"])
        batches, steps, _ = arm_batches(settings, tokenizer, examples, 1)
        marks = {max(1, int(round(f * steps))): f for f in fractions}
        values = {}

        def on_step(step, model=model, marks=marks, values=values):
            if step in marks:
                model.eval()
                nll, _ = TorchScorer(model, tokenizer.pad_token_id, score["token_budget"]).score(probe_examples)
                model.train()
                values[marks[step]] = nll.astype(np.float64) - matrix.base_nll[index]
            return {}

        train(model, batches, steps, settings, tokenizer.pad_token_id, None, on_step=on_step)
        truth = matrix.row(task)[usable][None, :]
        hidden = np.isfinite(truth)
        hidden[:, known] = False
        for fraction, probe_values in sorted(values.items()):
            pred, _ = complete(rows, known, probe_values[None, :], forecast["method"], params, [])
            metrics = evaluate(pred, truth, hidden, q=plan.cfg["prediction"]["top_q"],
                               budget=plan.cfg["prediction"]["budget"])
            out.append({"task": task, "fraction": fraction, "step": int(fraction * steps), "steps": steps,
                        "rmse": metrics["rmse"], "top_q_f1": metrics["top_q_f1"],
                        "precision_at_b": metrics["precision_at_b"]})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.25, 0.5, 1.0])
    args = parser.parse_args()
    set_threads(1)
    table = early(Path(args.workdir), args.model, args.fractions)
    pd.set_option("display.width", 160)
    print(table.round(3).to_string(index=False))
    print(table.groupby("fraction")[["rmse", "top_q_f1", "precision_at_b"]].mean().round(3).to_string())


if __name__ == "__main__":
    main()
