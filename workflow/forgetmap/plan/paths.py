"""Where every job's files live: path templates with Snakemake wildcards, one per kind of file.

Rules use the templates as outputs and the plan's functions (which format them) as inputs, so no path
is typed out twice.
"""

from __future__ import annotations

import re

from ..io import definition_key  # noqa: F401 (the plan names data files by it)

# a generated or prepared data file is named by what defines it, not by its name alone: `{key}` is a digest of the
# settings its job reads (definition_key below), so two configs that define a corpus or a task alike share
# its file and two that differ never overwrite each other's
SHARD = "results/data/upstream/{corpus}/shard-{shard}.{key}.parquet"
TASK = "results/data/tasks/{task}.{key}.parquet"
BASE = "results/{model}/base"
CHECKPOINT = "results/{model}/checkpoints/{task}"
POSTTRAINED = "results/{model}/posttrained/{checkpoint}"  # a pointer to a checkpoint the user did not train
LOGGED = "results/{model}/logs/{logged}.parquet"  # a row's eval logs aligned with the upstream items
SCORES = "results/{model}/scores/{run}/shard-{shard}.parquet"
# a run of a fractional map (models.NAME.score.cells < 1) scores its cells only, named by which cells they are: another
# fraction, design or place is another file, and every one left on disk is read again where its cells are wanted
SCORES_CELLS = "results/{model}/scores/{run}/shard-{shard}.cells-{cells}.parquet"
MATRIX = "results/{model}/forgetting.parquet"
# the CPU probe run as a job on a cluster's partition (forgetmap.cost.probe), once: the figures of that partition's jobs
CPU_PROBE = "results/cost/probes/{partition}.json"
SPLIT = "results/{model}/splits/{split}.json"
PREDICTIONS = "results/{model}/prediction/{split}/{method}"
PREDICTION_METRICS = "results/{model}/prediction/{split}/{method}.tsv"
PREDICTION_SCORES = "results/{model}/prediction/scores.tsv"
PROBES = "results/{model}/prediction/probes/{split}.tsv"  # probe strategies side by side (+ _coverage.tsv, .png)
SIMILARITY = "results/{model}/correlations/semantic_similarity.npy"
LOWRANK = "results/{model}/lowrank/{name}"
CORRELATION = "results/{model}/correlations/{name}"
# the config's models side by side, named by them: another config's summary is another file
LOWRANK_SUMMARY = "results/lowrank_summary/{models}.tsv"
LOWRANK_SUMMARY_LOG = "results/logs/lowrank_summary/{models}.log"
LOWRANK_SUMMARY_BENCH = "results/benchmarks/lowrank_summary/{models}.tsv"
FORECAST_PROBES = "results/{model}/forecast/probes.parquet"  # the k probe examples (upstream rows)
FORECAST_SCORES = "results/{model}/forecast/scores/{task}.parquet"  # a forecast task's checkpoint on them
FORECAST = "results/{model}/forecast/{name}"  # forecast.parquet (rows, half-widths), summary.tsv, forecast.png
EXPLORER = "results/{model}/explorer.html"  # the offline page linking the matrix to its examples
HELDOUT = "results/{model}/mitigation/heldout.parquet"
TOKEN_LOSSES = "results/{model}/mitigation/token_losses/{task}.parquet"
REPLAY = "results/{model}/mitigation/{arm}/seed-{seed}/replay/{task}.parquet"
ARM_CHECKPOINT = "results/{model}/mitigation/{arm}/seed-{seed}/checkpoints/{task}"
ARM_SCORES = "results/{model}/mitigation/{arm}/seed-{seed}/{task}.parquet"
PLAIN_SCORES = "results/{model}/mitigation/none/matrix/{task}.parquet"  # the matrix's own fine-tune, judged
# the logs of the jobs whose SLURM time may be estimated (a retry leaves a note beside its log: forgetmap.attempts)
BASE_LOG = "results/logs/{model}/base_model.log"
FINETUNE_LOG = "results/logs/{model}/finetune/{task}.log"
SCORE_LOG = "results/logs/{model}/score/{run}/shard-{shard}.log"
SCORE_CELLS_LOG = "results/logs/{model}/score/{run}/shard-{shard}.cells-{cells}.log"
FORECAST_SCORES_LOG = "results/logs/{model}/forecast/scores/{task}.log"
TOKEN_LOSSES_LOG = "results/logs/{model}/mitigation/token_losses/{task}.log"
ARM_LOG = "results/logs/{model}/mitigation/{arm}/seed-{seed}/{task}.log"
PLAIN_LOG = "results/logs/{model}/mitigation/none/matrix/{task}.log"
SEMANTIC_LOG = "results/logs/{model}/semantic_similarity.log"
GRADIENT_LOG = "results/logs/{model}/gradient_similarity.log"
# their `benchmark:` files: what a finished job took (forgetmap.cost.learned learns the rest of its kind's time)
BASE_BENCH = "results/benchmarks/{model}/base_model.tsv"
FINETUNE_BENCH = "results/benchmarks/{model}/finetune/{task}.tsv"
SCORE_BENCH = "results/benchmarks/{model}/score/{run}/shard-{shard}.tsv"
SCORE_CELLS_BENCH = "results/benchmarks/{model}/score/{run}/shard-{shard}.cells-{cells}.tsv"
TOKEN_LOSSES_BENCH = "results/benchmarks/{model}/mitigation/token_losses/{task}.tsv"
ARM_BENCH = "results/benchmarks/{model}/mitigation/{arm}/seed-{seed}/{task}.tsv"
PLAIN_BENCH = "results/benchmarks/{model}/mitigation/none/matrix/{task}.tsv"
SEMANTIC_BENCH = "results/benchmarks/{model}/semantic_similarity.tsv"
GRADIENT_BENCH = "results/benchmarks/{model}/gradient_similarity.tsv"
PREDICT_LOG = "results/logs/{model}/predict/{split}/{method}.log"
PREDICT_BENCH = "results/benchmarks/{model}/predict/{split}/{method}.tsv"
MITIGATION = "results/{model}/mitigation/{name}"
CORRECTNESS = "results/{model}/correctness/{name}"
BINARY_PREDICTIONS = "results/{model}/correctness/prediction/{split}/{binary_method}"
BINARY_PREDICTION_METRICS = "results/{model}/correctness/prediction/{split}/{binary_method}.tsv"
BINARY_PREDICTION_SCORES = "results/{model}/correctness/prediction_scores.tsv"
# the transitions job's outputs by command option, and the low-rank analysis of Y's
TRANSITION_OUTPUTS = {"transitions": "transitions.parquet", "forgetting": "forgetting_1to0.parquet",
                      "backward_transfer": "backward_transfer_0to1.parquet", "rates": "rates.tsv",
                      "rates_figure": "rates.png", "heatmap": "transitions.png"}
BINARY_LOWRANK_OUTPUTS = {"ranks": "lowrank.tsv", "point_biserial": "point_biserial.tsv", "figure": "lowrank.png"}

BASE_RUN = "base"  # the run every task's scores are compared with
NO_ARM = "none"  # plain fine-tuning: every arm's comparison
NEVER = "(?!)"  # a wildcard constraint that matches nothing: the rule serves no model


def alternatives(names) -> str:
    """A wildcard constraint matching exactly these names (longest first), or nothing if none."""
    names = sorted(set(names), key=len, reverse=True)
    return "|".join(re.escape(n) for n in names) if names else NEVER
