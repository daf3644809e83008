# Config access, wildcard constraints, target lists and resource helpers. Rules only wire files.

import json
import os
import re
import shlex

from snakemake.exceptions import WorkflowError

from forgetmap import config as fm_config
from forgetmap.data import upstream as fm_upstream
from forgetmap.errors import ForgetmapError
from forgetmap.released import released_tasks

try:
    CFG = fm_config.resolve(config)
    # shard plans are read from the corpora now, so bad ids fail before any job starts
    SHARDS = {
        name: fm_upstream.shard_plan(
            fm_upstream.example_ids({**spec, "seed": CFG["demo_seed"]}), CFG["shard_size"]
        )
        for name, spec in CFG["upstream"].items()
        if any(m["upstream"] == name for m in CFG["models"].values())
    }
except ForgetmapError as exc:
    raise WorkflowError(f"forgetmap: {exc}") from None

MODELS = list(CFG["models"])
IMPORTED = [m for m in MODELS if CFG["models"][m]["imported"] is not None]
COMPUTED = [m for m in MODELS if m not in IMPORTED]
try:
    TASKS = {
        model: (
            released_tasks(CFG["models"][model]["imported"]["matrix"], CFG["models"][model]["imported"]["meta"])
            if model in IMPORTED
            else fm_config.model_tasks(CFG, model)
        )
        for model in MODELS
    }
except (ForgetmapError, OSError, ValueError) as exc:
    raise WorkflowError(f"forgetmap: {exc}") from None


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    model=_alternatives(MODELS),
    split=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    task=_alternatives(CFG["tasks"]),
    corpus=_alternatives(SHARDS),
    run=_alternatives(["base", *CFG["tasks"]]),
    shard=r"\d+",


def as_json(value):
    return json.dumps(value, sort_keys=True)


def corpus_of(model):
    return CFG["models"][model]["upstream"]


def corpus_spec(corpus):
    """What a shard job reads: the source, never the corpus size (growing it adds shards only)."""
    spec = CFG["upstream"][corpus]
    if spec["format"] == "demo":
        return {"format": "demo", "seed": CFG["demo_seed"]}
    return {"format": spec["format"], "path": spec["path"]}


def shard_paths(model):
    corpus = corpus_of(model)
    return [f"results/data/upstream/{corpus}/shard-{k}.parquet" for k in range(len(SHARDS[corpus]))]


def score_paths(model, run):
    return [
        f"results/{model}/scores/{run}/shard-{k}.parquet"
        for k in range(len(SHARDS[corpus_of(model)]))
    ]


def model_dir(model, run):
    return f"results/{model}/base" if run == "base" else f"results/{model}/checkpoints/{run}"


def checkpoint_output(path):
    out = directory(path)
    return out if CFG["keep_checkpoints"] else temp(out)


def resource(stage, key):
    """A configured resource of a model's stage; the runtime grows with each retry (SLURM --time)."""
    if key == "runtime":
        return lambda wildcards, attempt: CFG["models"][wildcards.model]["resources"][stage][key] * attempt
    return lambda wildcards: CFG["models"][wildcards.model]["resources"][stage][key]


def split_paths(model):
    imported = CFG["models"][model]["imported"]
    return [f"results/{model}/splits/{name}.json" for name in (imported or {}).get("splits", {})]


def all_targets():
    targets = [f"results/{model}/forgetting.parquet" for model in MODELS]
    targets += [f"results/{model}/lowrank/r2.tsv" for model in MODELS]
    targets += [p for model in MODELS for p in split_paths(model)]
    targets += [p for model in MODELS for p in correlation_targets(model)]
    targets += [p for model in MODELS for p in prediction_targets(model)]
    return targets + ["results/lowrank_summary.tsv"]
