"""`forgetmap <command>`: one command per workflow rule, usable without Snakemake.

This module parses and dispatches; the stages own the behaviour. Each command is a row of `COMMANDS`:
its name, the `module:function` it calls with the parsed arguments as keyword arguments, and those
arguments. Settings arrive as JSON (what forgetmap.plan gives the rule), so a rule's `params` are
exactly what its command sees and Snakemake reruns a job when they change. Nothing heavy is imported
before a command is chosen: `forgetmap --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys

from . import attempts, warm
from .errors import LOG_FORMAT, ForgetmapError

log = logging.getLogger("forgetmap")


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def arg(*flags, **options):
    return flags, options


OUT = arg("--out", required=True)
THREADS = arg("--threads", type=int, default=1, help="torch threads (the rule's threads)")
GPUS = arg("--gpus", type=int, default=None, help="GPUs this job claims before CUDA starts (the rule's `gpu` "
                                                   "resource): free devices by lock file on a workstation, or those "
                                                   "SLURM gave it; 0: the job sees no GPU; absent: as visible")
SETTINGS = arg("--settings", type=_json, required=True, help="the job's settings from forgetmap.plan (JSON)")
MATRIX = arg("--matrix", required=True, help="a forgetting.parquet")
SHARDS = arg("--shards", nargs="+", required=True, help="the upstream shards, in corpus order")
# what a mitigation arm's fine-tune reads besides the base and the task (its settings say which it uses)
ARM_INPUTS = [arg("--replay", default=None, help="upstream examples to mix in (replay-selection's output)"),
              arg("--token-losses", default=None, help="the base model's token losses on the task (token-losses)"),
              arg("--matrix", default=None, help="online replay: the forgetting matrix (train rows, base NLL)"),
              arg("--split", default=None, help="online replay: the split definition whose train rows complete the task"),
              arg("--shards", nargs="+", default=None, help="online replay: the upstream shards (the replay pool); a "
                                                             "monitored fine-tune: the corpus whose items it watches")]
ALPHAS = arg("--alphas", type=_json, default=[], help="JSON list: interpolation weights toward the fine-tune judged "
                                                     "besides the fine-tune itself (mitigation.interpolation)")
TASKS = arg("--tasks", nargs="+", required=True, help="TASK=task.parquet ...")
RELEASED = [arg("--matrix", required=True, help="released Z as .npy (tasks x examples)"),
            arg("--meta", default=None, help="its .meta JSON (default: MATRIX.meta)"),
            arg("--base-logprobs", default=None, help="base model mean log-probs .npy (N,)"),
            arg("--sources", default=None, help="text file, one source label per example"),
            arg("--example-ids", default=None, help="text file, one example id per example (default: CORPUS-000000, ...)"),
            arg("--corpus", default="upstream", help="prefix of the generated example ids"),
            arg("--groups", type=_json, default=None, help='{category: "in_domain"|"out_of_domain"}'),
            arg("--statistic", default="nll_change", choices=("nll_change", "forgotten_1to0"),
                help="what the .npy holds: Z, or the binary 1->0 matrix Y")]
LOWRANK_OUTPUTS = ("r2", "spectrum", "heatmap", "components", "component_figure", "sources", "summary")

# name, help, "module:function", arguments, uses transformers
COMMANDS = [
    ("schema", "print the config JSON schema (YAML) generated from forgetmap.config.schema",
     "config.schema:schema_command",
     [arg("--out", default=None, help="write to this file instead of stdout")], False),
    ("calibrate", "measure this machine's CPU figures for the job time estimates (forgetmap.cost) into a rates file",
     "calibrate:calibrate_command",
     [THREADS, arg("--out", default=None, help="the rates file to write (default: the package's)"),
      arg("--jobs", type=int, default=None, help="processes measuring at once (default: the CPUs / threads, as a "
                                                 "local run fills the machine)")], True),
    ("probe-cpu", "run the CPU probe on this machine as a cluster partition's job: its figures size that partition's "
                  "CPU jobs (forgetmap.cost.probe)",
     "calibrate:probe_command",
     [arg("--partition", required=True, help="the partition this job runs on (named in the figures' source)"),
      arg("--out", required=True, help="the probe file to write")], True),
    ("from-gguf", "dequantize a GGUF file (llama.cpp's format) into a model directory a config's base.path can name",
     "from_gguf:convert_command",
     [arg("gguf_file", help="the .gguf file"), arg("--out", required=True, help="the model directory to write"),
      arg("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="the saved weights' dtype")],
     True),
    ("warm-start", "serve a local run's jobs from one process that has imported what they import (forgetmap.warm)",
     "warm:serve_command",
     [arg("--socket", dest="socket_path", required=True, help="the Unix socket to serve at"),
      arg("--parent", type=int, required=True, help="the run's process: the server ends with it")], False),
    ("shard-upstream", "write one scoring shard of an upstream corpus", "data.upstream:shard_command",
     [SETTINGS, OUT], False),
    ("prepare-task", "validate or generate a task into the task contract", "data.tasks:task_command",
     [SETTINGS, OUT], False),
    ("base-model", "pretrain the demo base model, or point to real weights", "base:base_command",
     [SETTINGS, THREADS, GPUS, OUT], True),
    ("checkpoint", "point to a checkpoint forgetmap did not train (a row of a post-training map)",
     "base:checkpoint_command", [SETTINGS, OUT], True),
    ("finetune", "fine-tune a base model on one task (a mitigation arm with --replay / --token-losses)",
     "train:finetune",
     [arg("--base", required=True, help="base model directory"),
      arg("--task", required=True, help="task parquet (task contract)"), SETTINGS, THREADS, GPUS,
      *ARM_INPUTS, arg("--heldout", default=None, help="online replay: the held-out set no replay may draw"),
      arg("--probes", default=None, help="a monitored fine-tune (finetune.monitor): the forecast's probes"),
      arg("--out", required=True, help="checkpoint directory to create")], True),
    ("arm", "a mitigation arm's run: fine-tune under the arm, then judge the checkpoint on the held-out set",
     "arm:arm_command",
     [arg("--base", required=True, help="base model directory"),
      arg("--task", required=True, help="task parquet (task contract)"), SETTINGS, THREADS, GPUS, *ARM_INPUTS,
      arg("--score-settings", type=_json, required=True, help="the scoring settings (JSON), as the matrix's"),
      arg("--heldout", required=True, help="the held-out set: never replayed, every arm judged on it"),
      arg("--out", required=True, help="checkpoint directory to create"),
      arg("--scores", required=True, help="held-out scores to write (scores contract)"),
      arg("--summary", required=True, help="JSON: validation NLL, training figures"), ALPHAS], True),
    ("score", "per-example NLL of one upstream shard under one model", "score:score_shard",
     [arg("--model-dir", required=True), arg("--shard", required=True), SETTINGS, THREADS, GPUS, OUT], True),
    ("eval-log", "a row's evaluation logs (lm-eval samples, LightEval details) aligned with the upstream items",
     "correctness.logs:import_logs", [SETTINGS, SHARDS, OUT], False),
    ("logged-scores", "an eval-log row's items of one upstream shard, as a score file (correctness, no NLL)",
     "correctness.logs:logged_scores",
     [arg("--table", required=True, help="the row's aligned logs (eval-log's output)"),
      arg("--shard", required=True), OUT], False),
    ("item-map", "an item map for the forgetting monitor from per-sample evaluation logs of several checkpoints "
                 "(lm-eval --log_samples, LightEval details)", "monitor.item_logs:item_map_command",
     [arg("--checkpoint", action="append", required=True, metavar="NAME=FILE_OR_GLOB",
          help="a checkpoint's log file(s) (a glob; repeat for several files or checkpoints): one row of the map"),
      arg("--format", default="lm_eval", choices=("lm_eval", "lighteval")),
      arg("--metric", default=None, help="the log's per-sample metric (default: acc for lm_eval, extractive_match "
                                         "for lighteval)"),
      arg("--id", default="{task}/{doc_id}", help="how an item is named, over the log's task, doc_id and doc "
                                                   "(default: as the monitor names an lm-eval task's items)"),
      arg("--base", default=None, help="the checkpoint that is the base itself: its correctness is the map's "
                                       "record of the base, not a row"),
      arg("--method", default="additive", help="the completion method the map carries"), OUT], False),
    ("forgetting-matrix", "assemble Z from the base and per-task scores", "matrix:matrix_command",
     [SETTINGS, SHARDS, OUT], False),
    ("lowrank", "R² by rank, spectrum, heatmap and significant components of Z", "lowrank:lowrank_command",
     [MATRIX, arg("--expected-tasks", type=_json, default=None, help="JSON list: the config's tasks, in order"),
      arg("--max-rank", type=int, default=30),
      arg("--n-components", dest="components", type=int, default=4, help="leading components to describe"),
      arg("--top-tasks", type=int, default=5), arg("--top-examples", type=int, default=100),
      *[arg(f"--{name.replace('_', '-')}", dest=f"output_{name}", required=True) for name in LOWRANK_OUTPUTS]],
     False),
    ("lowrank-summary", "model x rank table of R² across models", "lowrank:summary_command",
     [arg("--r2", nargs="+", required=True, help="MODEL=path/to/r2.tsv ..."), OUT], False),
    ("import", "the authors' released matrix as a forgetting.parquet", "released:import_command",
     [*RELEASED, OUT], False),
    ("release", "a forgetting.parquet as a released map in the authors' format (.npy, .meta, base log-probs, sources, "
                "example ids), which `import` and `models.NAME.imported` read back", "released:release_command",
     [arg("--matrix", required=True, help="a forgetting.parquet (Z) or forgetting_1to0.parquet (Y)"),
      arg("--name", default=None, help="the .npy's name (default: the matrix file's stem)"),
      arg("--splits", nargs="+", default=None, help="SPLIT=results/MODEL/splits/SPLIT.json ...: written as the "
                                                    "authors' split pickles"),
      arg("--out", required=True, help="the directory to write")], False),
    ("import-split", "an authors' released split pickle as a split definition", "released:import_split_command",
     [*RELEASED, arg("--name", required=True), arg("--split", required=True, help="the split .pkl"), OUT], False),
    ("semantic-similarity", "correlate Z with task-example embedding cosine", "correlate:semantic_command",
     [MATRIX, SHARDS, TASKS, SETTINGS, THREADS, GPUS, arg("--out", required=True, help="TSV: scope, pearson, ..."),
      arg("--figure", required=True),
      arg("--similarity-out", default=None, help="write the similarity matrix (.npy) here")], True),
    ("gradient-similarity", "correlate Z with projected gradient products", "correlate:gradient_command",
     [arg("--base", required=True, help="base model directory"), MATRIX, SHARDS, TASKS, SETTINGS, THREADS, GPUS,
      arg("--out", required=True), arg("--figure", required=True)], True),
    ("cross-task", "correlations between the forgetting rows of tasks", "correlate:cross_task_analysis",
     [arg("--matrix", dest="matrix_path", required=True), arg("--out", dest="out_tsv", required=True),
      arg("--summary", dest="out_summary", required=True), arg("--figure", dest="out_png", required=True)], False),
    ("split-definition", "write a prediction split's train and test tasks as JSON", "predict.protocol:split_command",
     [arg("--split", type=_json, required=True, help='{"name", "train_tasks", "test_tasks"}'), OUT], False),
    ("predict", "the prediction protocol for one split and one method, all seeds", "predict.protocol:predict_command",
     [MATRIX, arg("--split", required=True, help="split definition JSON file"), SETTINGS,
      arg("--out", required=True, help="directory of seed-{s}.parquet predicted rows"),
      arg("--metrics", required=True, help="TSV of per-seed metrics"),
      arg("--similarity", default=None, help="tasks x examples .npy (the semantic method)")], False),
    ("forecast-probes", "choose the k probe examples a forecast task is scored on, from the measured tasks' rows",
     "predict.forecast:probes_command",
     [SETTINGS, SHARDS, arg("--scores", nargs="+", required=True, help="the base's and the fit rows' score files"),
      OUT], False),
    ("forecast-trajectory", "complete each monitored fine-tune's probe checks into forecast rows, against the "
     "measured row where there is one", "monitor.trajectory:trajectory_command",
     [SETTINGS, MATRIX, arg("--probes", required=True, help="the probes (forecast-probes' output)"),
      arg("--checkpoints", nargs="+", required=True, help="each monitored task's fine-tune, in the settings' order"),
      OUT, arg("--figure", required=True),
      arg("--transitions", default=None, help="a corpus with items: the transitions file (the items' map)"),
      arg("--base-scores", nargs="+", default=None, help="a corpus with items: the base's score files (their F and "
                                                         "BT are counted against it)")], False),
    ("forecast", "complete each forecast task's row from its probe scores, with conformal half-widths (and its "
                 "items' correctness rates where the corpus has items)",
     "correctness.forecast:forecast_with_items",
     [SETTINGS, MATRIX, arg("--probes", required=True, help="the probes (forecast-probes' output)"),
      arg("--scores", nargs="+", required=True, help="each forecast task's probe scores (a monitored fine-tune's "
                                                      "checkpoint instead), in the settings' order"),
      arg("--base-scores", nargs="+", required=True, help="the base's score files (the tokens of a full scoring)"),
      OUT, arg("--summary", required=True), arg("--figure", required=True),
      arg("--transitions", default=None, help="a corpus with items: the transitions file (the items' map)")], False),
    ("forecast-before", "forecast the rows of tasks marked `forecast: before` from the map and their text alone "
                        "(nothing fine-tuned), with conformal half-widths from leave-one-task-out folds",
     "predict.before:before_command",
     [arg("--matrix", dest="matrix_path", required=True, help="a forgetting.parquet"), SHARDS, TASKS, SETTINGS,
      THREADS, OUT, arg("--summary", required=True)], True),
    ("explorer", "the offline HTML page linking a model's matrix to its examples, tasks and components",
     "explorer:explorer_command",
     [arg("--settings", type=_json, default=None, help="a model's page: its settings from forgetmap.plan (JSON)"),
      arg("--matrix", default=None, help="a model's page: its forgetting.parquet"),
      arg("--checks", default=None, help="a trainer run's page instead: its forgetting monitor's directory "
                                          "(OUTPUT_DIR/forgetmap-monitor), its checks as a timeline"),
      OUT, arg("--shards", nargs="+", default=None, help="the upstream shards (the texts)"),
      arg("--forecast", default=None, help="the model's forecast rows"),
      arg("--trajectory", default=None, help="the model's monitored fine-tunes' checks (forecast/trajectory.tsv)"),
      arg("--transitions", default=None, help="the items' transitions (correctness)"),
      arg("--predictions", nargs="+", default=None, help="TASK=prediction directory, ... (seed 0 is shown)"),
      arg("--arm-scores", nargs="+", default=None, help="TASK:ARM=held-out scores, ...")], False),
    ("heldout-set", "the upstream examples no arm replays, used to judge every arm",
     "mitigation.replay:heldout_command", [SETTINGS, SHARDS, OUT], False),
    ("token-losses", "the base model's loss on every target token of a task's training examples",
     "mitigation.tokens:token_losses_command",
     [arg("--base", required=True), arg("--task", required=True), SETTINGS, THREADS, GPUS, OUT], True),
    ("replay-selection", "the upstream examples a replay arm mixes into one task's fine-tune",
     "mitigation.replay:replay_command",
     [SETTINGS, arg("--heldout", required=True), SHARDS, arg("--task", required=True),
      arg("--prediction", default=None, help="predicted replay: the prediction directory"),
      arg("--matrix", default=None, help="ground_truth / high_base_nll replay: the forgetting matrix"),
      arg("--forecast", default=None, help="predicted replay of a forecast task: the model's forecast rows"), OUT],
     False),
    ("evaluate-arm", "an arm's checkpoint on the held-out upstream examples and the task's validation split",
     "mitigation.evaluate:evaluate_command",
     [arg("--model-dir", required=True), arg("--base", required=True, help="the base model (interpolations, signals)"),
      arg("--heldout", required=True), arg("--task", required=True), SETTINGS, THREADS, GPUS, OUT,
      arg("--summary", required=True, help="JSON: validation NLL, signals, training figures"), ALPHAS], True),
    ("mitigation-summary", "per (arm, task, seed) forgetting, paired tests against none and random, figures",
     "mitigation.summary:summary_command",
     [MATRIX, SETTINGS, arg("--summary", required=True), arg("--tests", required=True),
      arg("--forgetting-figure", required=True), arg("--paired-figure", required=True),
      arg("--tradeoff-figure", required=True), arg("--per-token-figure", required=True),
      arg("--fronts", required=True, help="TSV: every (arm, knob value, alpha) point and its Pareto fronts"),
      arg("--costs", required=True, help="TSV: each fine-tune's costs against plain fine-tuning's"),
      arg("--predictors", required=True, help="TSV: each cheap signal's R² for the held-out forgetting"),
      arg("--fronts-figure", required=True),
      arg("--protection", required=True, help="TSV: what each fine-tune protected against the predicted row"),
      arg("--transitions", default=None, help="the transition codes (base correctness of the held-out items)")], False),
    ("probe-evaluation", "probe strategies side by side for one split: metrics by k, tests against random probes",
     "predict.probe_evaluation:probe_evaluation_command",
     [MATRIX, arg("--split", required=True), SETTINGS, OUT, arg("--coverage-out", required=True),
      arg("--figure", required=True)], False),
    ("prediction-scores", "mean and std over seeds of every split, method, metric", "predict.protocol:scores_command",
     [arg("--metrics", nargs="+", required=True), OUT, arg("--figure", required=True),
      arg("--binary", action="store_true", help="the metrics of the 1->0 matrix Y's prediction")], False),
    ("transitions", "correctness transitions base -> each task: matrices Y and Y_BT, rates, figures",
     "correctness.transitions:transitions_command",
     [SETTINGS, SHARDS, *[arg(f"--{name.replace('_', '-')}", dest=f"output_{name}", required=True)
                          for name in ("transitions", "forgetting", "backward_transfer", "rates", "rates_figure",
                                       "heatmap")]], False),
    ("lowrank-binary", "logistic MF of Y by rank beside the SVD R² of Z; point-biserial r(Z, Y)",
     "correctness.lowrank:lowrank_binary_command",
     [arg("--matrix", default=None, help="Z (none for an imported binary matrix)"),
      arg("--forgetting", required=True, help="the 1->0 matrix Y (transitions' output, or imported)"),
      *[arg(f"--{name.replace('_', '-')}", dest=f"output_{name}", required=True)
        for name in ("ranks", "point_biserial", "figure")]], False),
    ("predict-binary", "the prediction protocol on the 1->0 matrix Y for one split and one predictor",
     "predict.protocol:predict_binary_command",
     [arg("--forgetting", required=True, help="the 1->0 matrix Y"), arg("--split", required=True), SETTINGS,
      arg("--out", required=True), arg("--metrics", required=True),
      arg("--matrix", default=None, help="Z, for predictors fitted on it (mf_thresholded)")], False),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forgetmap", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text, target, arguments, transformers in COMMANDS:
        p = sub.add_parser(name, help=help_text)
        for flags, options in arguments:
            p.add_argument(*flags, **options)
        p.set_defaults(target=target, transformers=transformers)
    return parser


def _quiet_transformers() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _call(args: argparse.Namespace):
    """Call the command's function with its arguments (`output_*` ones gathered into `outputs`)."""
    module, function = args.target.split(":")
    kwargs = {k: v for k, v in vars(args).items()
              if k not in ("command", "verbose", "target", "transformers", "gpus")}
    outputs = {k[len("output_"):]: kwargs.pop(k) for k in list(kwargs) if k.startswith("output_")}
    if outputs:
        kwargs["outputs"] = outputs
    if args.command == "warm-start":  # each job the server forks runs this entry
        kwargs["run"] = main
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)(**kwargs)


def main(argv: list[str] | None = None) -> int:
    """The `forgetmap` command: parse, claim the job's GPUs, run the command, print its summary as JSON (in a
    child of the run's warm server where it has one: forgetmap.warm)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if os.environ.get(warm.ENV) and argv[:1] != ["warm-start"]:
        code = warm.run_remote(argv)
        if code is not None:
            return code
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=LOG_FORMAT, stream=sys.stderr, force=True)  # force: a warm server's child too
    retry = attempts.take()  # a retry of a job whose time was estimated: how far the estimate missed
    if retry:
        log.warning(retry)
    try:
        if getattr(args, "gpus", None) is not None:  # claim the job's GPUs (0: it sees none)
            from .devices import claim_gpus

            claim = claim_gpus(args.gpus)  # held until this process exits
            if args.gpus:
                log.info("CUDA_VISIBLE_DEVICES=%s (%s)", os.environ["CUDA_VISIBLE_DEVICES"],
                         "claimed by lock file" if claim.devices else "its own, set by the scheduler")
        if args.transformers:
            _quiet_transformers()
        summary = _call(args)
    except ForgetmapError as exc:
        print(f"forgetmap {args.command}: error: {exc}", file=sys.stderr)
        return 2
    if summary is not None:
        print(json.dumps({"command": args.command, **summary}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
