# The plan of every job (forgetmap.plan), the wildcard constraints it gives, and the small get_*
# functions rules call for their inputs, params, threads and resources. Rules only wire files.

import json
import os
import shlex

from snakemake.exceptions import WorkflowError

from forgetmap import config as fm_config
from forgetmap import plan as fm_plan
from forgetmap import preflight as fm_preflight
from forgetmap.errors import ForgetmapError

try:
    for path in workflow.configfiles:  # one key given twice in a mapping: YAML keeps the last, silently
        fm_config.check_duplicate_keys(path)
    PLAN = fm_plan.Plan(config)
    if workflow.is_main_process:  # what the config points at, once, before any job (not in each cluster job)
        fm_preflight.check(PLAN)
except ForgetmapError as exc:
    raise WorkflowError(f"forgetmap: {exc}") from None
CFG = PLAN.cfg
COMPUTED = fm_plan.alternatives(PLAN.computed)  # rule-level constraints: models a rule serves
IMPORTED = fm_plan.alternatives(PLAN.imported)
ITEM_MODELS = fm_plan.alternatives(PLAN.item_models)  # models whose corpus has items with an answer
Y_MODELS = fm_plan.alternatives(PLAN.y_models)  # models with a 1->0 matrix Y: item models, binary imports
BINARY_IMPORTED = fm_plan.alternatives(PLAN.binary_imported)
Z_IMPORTED = fm_plan.alternatives([m for m in PLAN.imported if m not in PLAN.binary_imported])
REPLAY_ARMS = fm_plan.alternatives([a for a, spec in PLAN.arms().items() if spec["replay"] != "none"])


wildcard_constraints:
    **PLAN.wildcard_constraints(),


def as_json(value):
    return json.dumps(value, sort_keys=True)


def optional_inputs(*keys):
    """The one way rules pass the optional inputs a job has to its command, as `--key path` (several
    paths after one flag) for each of `keys` present in the job's input."""

    def options(wc, input):
        parts = []
        for key in keys:
            paths = input[key] if key in input.keys() else []
            paths = paths if isinstance(paths, list) else [paths]
            if paths:
                parts.append(f"--{key.replace('_', '-')} " + " ".join(shlex.quote(str(p)) for p in paths))
        return " ".join(parts)

    return options


def get_settings(kind):
    """The JSON settings a job's command reads (and Snakemake reruns the job when they change)."""
    settings = {
        "shard_upstream": lambda wc: PLAN.shard_settings(wc.corpus, int(wc.shard)),
        "prepare_task": lambda wc: PLAN.task_settings(wc.task),
        "base_model": lambda wc: PLAN.base_settings(wc.model),
        "finetune": lambda wc: PLAN.finetune_settings(wc.model, wc.task),
        "score": lambda wc: PLAN.score_settings(wc.model),
        "forgetting_matrix": lambda wc: PLAN.matrix_settings(wc.model),
        "correlations": lambda wc: PLAN.correlation_settings(wc.model),
        "split_definition": lambda wc: PLAN.splits(wc.model)[wc.split],
        "predict": lambda wc: PLAN.prediction_settings(wc.method),
        "heldout_set": lambda wc: PLAN.heldout_settings(wc.model),
        "token_losses": lambda wc: PLAN.token_loss_settings(wc.model, wc.task),
        "replay_selection": lambda wc: PLAN.replay_settings(wc.model, wc.arm, int(wc.seed), wc.task),
        "arm_finetune": lambda wc: PLAN.arm_settings(wc.model, wc.arm, int(wc.seed), wc.task),
        "mitigation_summary": lambda wc: PLAN.mitigation_summary_settings(wc.model),
        "transitions": lambda wc: PLAN.transitions_settings(wc.model),
        "predict_binary": lambda wc: PLAN.binary_prediction_settings(wc.binary_method),
        "probe_evaluation": lambda wc: PLAN.probe_evaluation_settings(),
    }[kind]
    return lambda wc: as_json(settings(wc))


def get_resource(stage, key):
    """A configured resource of the model's `stage` (threads too); runtime grows with each retry."""
    if key == "runtime":
        return lambda wc, attempt: PLAN.resource(wc.model, stage, key, attempt)
    return lambda wc: PLAN.resource(wc.model, stage, key)


def get_checkpoint(wc):
    return PLAN.checkpoint(wc.model, wc.run)


def get_shards(wc):
    return PLAN.shard_paths(wc.model)


def get_shard(wc):
    return fm_plan.SHARD.format(corpus=PLAN.corpus(wc.model), shard=wc.shard)


def get_task_files(wc):
    return list(PLAN.task_paths(wc.model).values())


def get_task_args(wc):
    return [f"{t}={p}" for t, p in PLAN.task_paths(wc.model).items()]


def checkpoint_output(path):
    out = directory(path)
    return out if CFG["keep_checkpoints"] else temp(out)


def get_corpus_file(wc):
    """A corpus file (a dataset's changes show in the shard digests the settings carry)."""
    spec = CFG["upstream"][wc.corpus]
    return [ancient(spec["path"])] if spec["format"] in ("parquet", "jsonl") else []


def get_task_inputs(wc):
    spec = CFG["tasks"][wc.task]
    return [p for p in (spec["path"], spec["validation_path"]) if p and spec["format"] == "file"]


def get_matrix_scores(wc):
    """Every score file the matrix reads: each run's shards (the settings say which run is which)."""
    return [p for run in PLAN.runs(wc.model) for p in PLAN.scores(wc.model, run)]


def get_imported_inputs(wc):
    spec = CFG["models"][wc.model]["imported"]
    meta = spec["meta"] or f"{spec['matrix']}.meta"
    optional = [meta, spec["base_logprobs"], spec["sources"]]
    return [spec["matrix"]] + [p for p in optional if p and os.path.exists(p)]


def get_released_split(wc):
    return PLAN.splits(wc.model)[wc.split]["released"]


def get_similarity(wc):
    return [fm_plan.SIMILARITY.format(model=wc.model)] if wc.method == "semantic" else []


def get_prediction_metrics(wc):
    return [fm_plan.PREDICTION_METRICS.format(model=wc.model, split=s, method=m)
            for s in PLAN.splits(wc.model) for m in PLAN.methods(wc.model)]


def get_lowrank_tables(wc):
    return {m: fm_plan.LOWRANK.format(model=m, name="r2.tsv") for m in PLAN.z_models}


def get_imported_matrix(wc):
    return CFG["models"][wc.model]["imported"]["matrix"]


def get_import_options(wc):
    """The released files of an imported model as `forgetmap import` options."""
    spec = CFG["models"][wc.model]["imported"]
    options = []
    for key in ("matrix", "meta", "base_logprobs", "sources"):
        if spec[key]:
            options += [f"--{key.replace('_', '-')}", spec[key]]
    groups = {c: v["group"] for c, v in CFG["categories"].items()}
    options += ["--corpus", wc.model, "--groups", as_json(groups), "--statistic", spec["statistic"]]
    return " ".join(shlex.quote(o) for o in options)


def analysis_report(template, category):
    """An analysis output under `template`, tagged for `snakemake --report` with its caption."""

    def tagged(name, caption):
        return report(template.replace("{name}", name), caption=f"../workflow/report/{caption}.rst",
                      category=category, subcategory="{model}")

    return tagged


lowrank_report = analysis_report(fm_plan.LOWRANK, "Low-rank structure")
correlation_report = analysis_report(fm_plan.CORRELATION, "Correlations")


def get_replay_inputs(wc):
    """The held-out set, the pool's shards, the task, and the replay scores' source file if any."""
    inputs = {"heldout": fm_plan.HELDOUT.format(model=wc.model), "shards": PLAN.shard_paths(wc.model),
              "task": fm_plan.TASK.format(task=wc.task)}
    return {**inputs, **PLAN.replay_inputs(wc.model, wc.arm, wc.task)}


def get_arm_inputs(wc):
    spec = PLAN.arms()[wc.arm]
    inputs = {"base": fm_plan.BASE.format(model=wc.model), "task": fm_plan.TASK.format(task=wc.task)}
    if spec["replay"] != "none":
        inputs["replay"] = fm_plan.REPLAY.format(**wc)
    if spec["tokens"] != "none" or spec["weights"] != "none":
        inputs["token_losses"] = fm_plan.TOKEN_LOSSES.format(model=wc.model, task=wc.task)
    return {**inputs, **PLAN.online_inputs(wc.model, wc.arm, wc.task)}


def get_mitigation_summary_inputs(wc):
    return PLAN.mitigation_summary_inputs(wc.model)


def get_arm_checkpoint(wc):
    return PLAN.arm_checkpoint(wc.model, wc.arm, int(wc.seed), wc.task)


def get_arm_scores(wc):
    return [fm_plan.ARM_SCORES.format(model=wc.model, arm=a, seed=s, task=t) for a, s, t in PLAN.arm_runs(wc.model)]


mitigation_report = analysis_report(fm_plan.MITIGATION, "Forgetting less")


correctness_report = analysis_report(fm_plan.CORRECTNESS, "Sample-wise correctness")
CORRECTNESS_SHOWN = ("rates", "rates_figure", "heatmap")  # the transitions outputs in the report


def get_binary_prediction_inputs(wc):
    """Y and the split; Z too for a predictor fitted on it."""
    from forgetmap.predict.protocol import BINARY_PREDICTORS

    inputs = {"forgetting": fm_plan.CORRECTNESS.format(model=wc.model, name=fm_plan.TRANSITION_OUTPUTS["forgetting"]),
              "split": fm_plan.SPLIT.format(model=wc.model, split=wc.split)}
    if BINARY_PREDICTORS[wc.binary_method][1] == "z":
        inputs["matrix"] = fm_plan.MATRIX.format(model=wc.model)
    return inputs


def get_lowrank_binary_inputs(wc):
    """Y, and Z where the model has it (the SVD R² and the point-biserial correlation beside Y's fit)."""
    inputs = {"forgetting": fm_plan.CORRECTNESS.format(model=wc.model, name=fm_plan.TRANSITION_OUTPUTS["forgetting"])}
    if wc.model in PLAN.z_models:
        inputs["matrix"] = fm_plan.MATRIX.format(model=wc.model)
    return inputs


def get_binary_prediction_metrics(wc):
    return [fm_plan.BINARY_PREDICTION_METRICS.format(model=wc.model, split=s, binary_method=m)
            for s in PLAN.splits(wc.model) for m in PLAN.binary_methods(wc.model)]
