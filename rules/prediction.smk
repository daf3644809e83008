# Forgetting prediction (paper §5): per model, split and method, all seeds in one job.


def splits_of(model):
    if model in IMPORTED:
        return list(CFG["models"][model]["imported"]["splits"])
    return list(fm_config.prediction_splits(CFG, model))


def methods_of(model):
    """The configured methods; `semantic` only where the model's texts give it a similarity matrix."""
    semantic = model in COMPUTED and CFG["models"][model]["correlations"]["semantic"]
    return [m for m in CFG["prediction"]["methods"] if m != "semantic" or semantic]


def _similarity(wc):
    if wc.method == "semantic":
        return [f"results/{wc.model}/correlations/semantic_similarity.npy"]
    return []


def prediction_targets(model):
    if not splits_of(model):
        return []
    return [f"results/{model}/prediction/scores.tsv"]


rule split_definition:
    output:
        "results/{model}/splits/{split}.json",
    wildcard_constraints:
        model=_alternatives(COMPUTED),
    params:
        split=lambda wc: as_json(fm_config.prediction_splits(CFG, wc.model)[wc.split]),
    log:
        "results/logs/{model}/split_definition/{split}.log",
    benchmark:
        "results/benchmarks/{model}/split_definition/{split}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap split-definition --split {params.split:q} --out {output:q} > {log:q} 2>&1"


rule predict:
    input:
        matrix="results/{model}/forgetting.parquet",
        split="results/{model}/splits/{split}.json",
        similarity=_similarity,
    output:
        predictions=directory("results/{model}/prediction/{split}/{method}"),
        metrics="results/{model}/prediction/{split}/{method}.tsv",
    wildcard_constraints:
        method=_alternatives(fm_config.PREDICTION_METHODS + fm_config.REFERENCE_METHODS),
    params:
        settings=as_json({k: v for k, v in CFG["prediction"].items() if k not in ("splits", "methods")}),
        similarity=lambda wc, input: f"--similarity {shlex.quote(input.similarity[0])}" if input.similarity else "",
    threads: 1
    log:
        "results/logs/{model}/predict/{split}/{method}.log",
    benchmark:
        "results/benchmarks/{model}/predict/{split}/{method}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} forgetmap predict --matrix {input.matrix:q} --split {input.split:q} "
        "--method {wildcards.method} --settings {params.settings:q} --out {output.predictions:q} "
        "--metrics {output.metrics:q} {params.similarity} > {log:q} 2>&1"


rule prediction_scores:
    input:
        lambda wc: [
            f"results/{wc.model}/prediction/{s}/{m}.tsv"
            for s in splits_of(wc.model)
            for m in methods_of(wc.model)
        ],
    output:
        table=report(
            "results/{model}/prediction/scores.tsv",
            caption="../workflow/report/prediction_scores.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
        figure=report(
            "results/{model}/prediction/scores.png",
            caption="../workflow/report/prediction_figure.rst",
            category="Forgetting prediction",
            subcategory="{model}",
        ),
    log:
        "results/logs/{model}/prediction_scores.log",
    benchmark:
        "results/benchmarks/{model}/prediction_scores.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prediction-scores --metrics {input:q} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"
