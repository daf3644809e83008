# How forgetting relates to semantic similarity, gradient similarity, and between tasks (paper §4).


def correlation_report(name, caption):
    return report(
        f"results/{{model}}/correlations/{name}",
        caption=f"../workflow/report/{caption}.rst",
        category="Correlations",
        subcategory="{model}",
    )


def _task_args(wc):
    return [f"{t}=results/data/tasks/{t}.parquet" for t in TASKS[wc.model]]


def correlation_targets(model):
    targets = [f"results/{model}/correlations/cross_task.tsv"]
    if model in COMPUTED:
        settings = CFG["models"][model]["correlations"]
        targets += [f"results/{model}/correlations/semantic.tsv"] if settings["semantic"] else []
        targets += [f"results/{model}/correlations/gradient.tsv"] if settings["gradient"] else []
    return targets


rule cross_task:
    input:
        "results/{model}/forgetting.parquet",
    output:
        pairs=correlation_report("cross_task.tsv", "cross_task"),
        summary=correlation_report("cross_task_summary.tsv", "cross_task_summary"),
        figure=correlation_report("cross_task.png", "cross_task_figure"),
    threads: 1
    log:
        "results/logs/{model}/cross_task.log",
    benchmark:
        "results/benchmarks/{model}/cross_task.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap cross-task --matrix {input:q} --out {output.pairs:q} "
        "--summary {output.summary:q} --figure {output.figure:q} > {log:q} 2>&1"


rule semantic_similarity:
    input:
        matrix="results/{model}/forgetting.parquet",
        shards=lambda wc: shard_paths(wc.model),
        tasks=lambda wc: [f"results/data/tasks/{t}.parquet" for t in TASKS[wc.model]],
    output:
        table=correlation_report("semantic.tsv", "semantic"),
        figure=correlation_report("semantic.png", "semantic_figure"),
        similarity="results/{model}/correlations/semantic_similarity.npy",
    wildcard_constraints:
        model=_alternatives(COMPUTED),
    params:
        settings=lambda wc: as_json(fm_config.correlation_settings(CFG, wc.model)),
        tasks=_task_args,
    threads: lambda wc: CFG["models"][wc.model]["resources"]["score"]["threads"]
    resources:
        gpu=resource("score", "gpu"),
        mem_mb=resource("score", "mem_mb"),
        runtime=resource("score", "runtime"),
    log:
        "results/logs/{model}/semantic_similarity.log",
    benchmark:
        "results/benchmarks/{model}/semantic_similarity.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap semantic-similarity --matrix {input.matrix:q} "
        "--shards {input.shards:q} --tasks {params.tasks:q} --settings {params.settings:q} "
        "--threads {threads} --out {output.table:q} --figure {output.figure:q} "
        "--similarity-out {output.similarity:q} > {log:q} 2>&1"


rule gradient_similarity:
    input:
        base="results/{model}/base",
        matrix="results/{model}/forgetting.parquet",
        shards=lambda wc: shard_paths(wc.model),
        tasks=lambda wc: [f"results/data/tasks/{t}.parquet" for t in TASKS[wc.model]],
    output:
        table=correlation_report("gradient.tsv", "gradient"),
        figure=correlation_report("gradient.png", "gradient_figure"),
    wildcard_constraints:
        model=_alternatives(COMPUTED),
    params:
        settings=lambda wc: as_json(fm_config.correlation_settings(CFG, wc.model)),
        tasks=_task_args,
    threads: lambda wc: CFG["models"][wc.model]["resources"]["finetune"]["threads"]
    resources:
        gpu=resource("finetune", "gpu"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=resource("finetune", "runtime"),
    log:
        "results/logs/{model}/gradient_similarity.log",
    benchmark:
        "results/benchmarks/{model}/gradient_similarity.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap gradient-similarity --base {input.base:q} "
        "--matrix {input.matrix:q} --shards {input.shards:q} --tasks {params.tasks:q} "
        "--settings {params.settings:q} --threads {threads} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"
