# How forgetting relates to semantic similarity, gradient similarity, and between tasks (paper §4).


rule cross_task:
    input:
        fm_plan.MATRIX,
    output:
        pairs=correlation_report("cross_task.tsv", "cross_task"),
        summary=correlation_report("cross_task_summary.tsv", "cross_task_summary"),
        figure=correlation_report("cross_task.png", "cross_task_figure"),
    threads: get_resource("analysis", "threads")
    resources:
        mem_mb=get_resource("analysis", "mem_mb"),
        runtime=get_resource("analysis", "runtime"),
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
        matrix=fm_plan.MATRIX,
        shards=get_shards,
        tasks=get_task_files,
    output:
        table=correlation_report("semantic.tsv", "semantic"),
        figure=correlation_report("semantic.png", "semantic_figure"),
        similarity=fm_plan.SIMILARITY,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("correlations"),
        tasks=get_task_args,
    threads: get_resource("semantic", "threads")
    resources:
        gpu=get_resource("semantic", "gpu"),
        mem_mb=get_resource("semantic", "mem_mb"),
        runtime=get_resource("semantic", "runtime"),
    log:
        "results/logs/{model}/semantic_similarity.log",
    benchmark:
        "results/benchmarks/{model}/semantic_similarity.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap semantic-similarity --matrix {input.matrix:q} "
        "--shards {input.shards:q} --tasks {params.tasks:q} --settings {params.settings:q} "
        "--threads {threads} --gpus {resources.gpu} --out {output.table:q} --figure {output.figure:q} "
        "--similarity-out {output.similarity:q} > {log:q} 2>&1"


rule gradient_similarity:
    input:
        base=fm_plan.BASE,
        matrix=fm_plan.MATRIX,
        shards=get_shards,
        tasks=get_task_files,
    output:
        table=correlation_report("gradient.tsv", "gradient"),
        figure=correlation_report("gradient.png", "gradient_figure"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("correlations"),
        tasks=get_task_args,
    threads: get_resource("gradient", "threads")
    resources:
        gpu=get_resource("gradient", "gpu"),
        mem_mb=get_resource("gradient", "mem_mb"),
        runtime=get_resource("gradient", "runtime"),
    log:
        "results/logs/{model}/gradient_similarity.log",
    benchmark:
        "results/benchmarks/{model}/gradient_similarity.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap gradient-similarity --base {input.base:q} "
        "--matrix {input.matrix:q} --shards {input.shards:q} --tasks {params.tasks:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"
