# The plan of every job (forgetmap.plan), the wildcard constraints it gives, and the few generic
# adapters rules use to ask it for their inputs, settings and resources. Rules only wire files.

import inspect
import json
import shlex
import sys

from snakemake.exceptions import WorkflowError

from forgetmap import config as fm_config
from forgetmap import plan as fm_plan
from forgetmap import warm as fm_warm
from forgetmap.config import preflight as fm_preflight
from forgetmap.cost import table as fm_times
from forgetmap.errors import ForgetmapError

# the rules that run on each stage's resources (`gpu=resource(stage, ...)`): the GPU model the profile names
# for them is the memory their jobs are sized against (tests/unit/test_memory.py keeps this in step)
STAGE_RULES = {"finetune": ("finetune", "arm_run"),
               "score": ("score", "score_cells", "forecast_scores", "token_losses", "plain_scores"),
               "semantic": ("semantic_similarity", "forecast_before"), "gradient": ("gradient_similarity",)}


def default_resource(name):
    """A default resource as the profile names it (`default-resources:`, e.g. profiles/slurm's partitions),
    or None where none does."""
    for arg in getattr(workflow.resource_settings.default_resources, "args", None) or []:
        key, _, value = str(arg).partition("=")
        if key.strip() == name:
            return value.strip().strip("'\"")
    return None


def profile_gpu_models():
    """The GPU model (`gpu_model`, sbatch --gpus=<model>:N) the profile names for each stage's rules:
    {stage: {profile setting: name}}, a rule's `set-resources` over the `default-resources`."""
    named = {}
    default = default_resource("gpu_model")
    for stage, names in STAGE_RULES.items():
        for name in names:
            value = (workflow.resource_settings.overwrite_resources.get(name) or {}).get("gpu_model")
            value = getattr(value, "raw", value)  # as written (a profile's value is an unevaluated expression)
            if value:
                named.setdefault(stage, {})[f"set-resources {name}"] = str(value).strip("'\"")
            elif default:
                named.setdefault(stage, {})["default-resources"] = default
    return named


def jobs_executor():
    """The executor the run submits its jobs to where they do not run on this machine ('slurm', ...), None for a
    local run: the command line's or its profile's `executor` (Snakemake settles its executor only after reading the
    Snakefile, so it is read here as Snakemake reads it). A cluster job itself plans too, and probes nothing."""
    if workflow.remote_exec:
        return "remote"
    import contextlib
    import io

    try:
        from snakemake.cli import parse_args

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            executor = parse_args(sys.argv[1:])[1].executor  # (it says again which profiles it read)
    except (Exception, SystemExit):  # not Snakemake's command line (its Python API): the jobs are local
        return None
    return None if executor in (None, "local", "dryrun", "touch") else str(executor)


# rules call `forgetmap`: the one beside the interpreter running Snakemake (a virtualenv's, unactivated) first
fm_warm.commands_first()
try:
    for path in workflow.configfiles:  # one key given twice in a mapping: YAML keeps the last, silently
        fm_config.check_duplicate_keys(path)
    PLAN = fm_plan.Plan(config, profile_gpu_models(), cluster=jobs_executor(), cpu_model=default_resource("cpu_model"),
                        cpu_partition=default_resource("slurm_partition"))
    if workflow.is_main_process:  # what the config points at, once, before any job (not in each cluster job)
        fm_preflight.check(PLAN)
        fm_times.report(PLAN)  # each job's time, where its SLURM time comes from the estimate
except ForgetmapError as exc:
    raise WorkflowError(f"forgetmap: {exc}") from None
CFG = PLAN.cfg
WARM = []  # the run's warm server, while it runs (the Snakefile's onstart)
COMPUTED = fm_plan.alternatives(PLAN.computed)  # rule-level constraints: models a rule serves
IMPORTED = fm_plan.alternatives(PLAN.imported)
ITEM_MODELS = fm_plan.alternatives(PLAN.item_models)  # models whose corpus has items with an answer
Y_MODELS = fm_plan.alternatives(PLAN.y_models)  # models with a 1->0 matrix Y: item models, binary imports
BINARY_IMPORTED = fm_plan.alternatives(PLAN.binary_imported)
Z_IMPORTED = fm_plan.alternatives([m for m in PLAN.imported if m not in PLAN.binary_imported])
Z_MODELS = fm_plan.alternatives(PLAN.z_models)  # models with a forgetting matrix Z
SCORED_RUNS = fm_plan.alternatives(PLAN.scored_runs())  # runs a model scores itself
LOGGED_RUNS = fm_plan.alternatives({r for m in PLAN.computed for r in PLAN.logged[m]})  # runs from eval logs
REPLAY_ARMS = fm_plan.alternatives(PLAN.mitigation.replay_arms())


wildcard_constraints:
    **PLAN.wildcard_constraints(),


def as_json(value):
    return json.dumps(value, sort_keys=True)


def job(method):
    """A plan method as a Snakemake input or params function: called with the job's wildcards it names
    (those annotated `int`, such as `seed` and `shard`, as integers)."""
    parameters = inspect.signature(method).parameters
    integers = {name for name, p in parameters.items() if p.annotation in (int, "int")}

    def call(wc):
        return method(**{name: int(getattr(wc, name)) if name in integers else getattr(wc, name)
                         for name in parameters})

    return call


def settings(method):
    """A plan method's settings for the job, as the JSON its command reads (Snakemake reruns the job when
    they change)."""
    planned = job(method)
    return lambda wc: as_json(planned(wc))


def arguments(method):
    """A plan method's list of command arguments, shell-quoted."""
    planned = job(method)
    return lambda wc: " ".join(shlex.quote(str(a)) for a in planned(wc))


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


def runtime(stage, log):
    """SLURM --time of a job whose stage's runtime may be estimated, growing with each retry; a retry of an
    estimated one leaves beside its `log` (a path template) how far the estimate missed (forgetmap.attempts)."""
    return lambda wc, attempt: PLAN.runtime(wc.model, stage, attempt, log.format(**dict(wc.items())))


def resource(stage, key):
    """A configured resource of the model's `stage` (threads too); runtime grows with each retry."""
    if key == "runtime":
        return lambda wc, attempt: PLAN.resource(wc.model, stage, key, attempt)
    return lambda wc: PLAN.resource(wc.model, stage, key)


def partition(stage):
    """The SLURM partition of a job that may ask for GPUs, derived from its GPU request so the two cannot
    drift: the profile's `gpu_partition` when the job asks for GPUs, its default `slurm_partition` when it
    asks for none (no partition, and so the cluster's default, where the profile names neither)."""

    def job_partition(wc):
        if PLAN.resource(wc.model, stage, "gpu"):
            return default_resource("gpu_partition") or default_resource("slurm_partition")
        return default_resource("slurm_partition")

    return job_partition


def checkpoint_output(path):
    out = directory(path)
    return out if CFG["keep_checkpoints"] else temp(out)


def analysis_report(template, category):
    """An analysis output under `template`, tagged for `snakemake --report` with its caption."""

    def tagged(name, caption):
        return report(template.replace("{name}", name), caption=f"../workflow/report/{caption}.rst",
                      category=category, subcategory="{model}")

    return tagged
