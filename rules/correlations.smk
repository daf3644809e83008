# How forgetting relates to semantic similarity, gradient similarity, and between tasks (paper §4).

correlation_report = analysis_report(fm_plan.CORRELATION, "Correlations")


rule cross_task:
    input:
        fm_plan.MATRIX,
    output:
        pairs=correlation_report("cross_task.tsv", "cross_task"),
        summary=correlation_report("cross_task_summary.tsv", "cross_task_summary"),
        figure=correlation_report("cross_task.png", "cross_task_figure"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
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
        shards=job(PLAN.shard_paths),
        tasks=job(PLAN.task_files),
    output:
        table=correlation_report("semantic.tsv", "semantic"),
        figure=correlation_report("semantic.png", "semantic_figure"),
        similarity=fm_plan.SIMILARITY,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.correlation_settings),
        tasks=job(PLAN.task_args),
    threads: resource("semantic", "threads")
    resources:
        gpu=resource("semantic", "gpu"),
        slurm_partition=partition("semantic"),
        mem_mb=resource("semantic", "mem_mb"),
        runtime=runtime("semantic", fm_plan.SEMANTIC_LOG),
    log:
        fm_plan.SEMANTIC_LOG,
    benchmark:
        fm_plan.SEMANTIC_BENCH
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
        shards=job(PLAN.shard_paths),
        tasks=job(PLAN.task_files),
    output:
        table=correlation_report("gradient.tsv", "gradient"),
        figure=correlation_report("gradient.png", "gradient_figure"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.correlation_settings),
        tasks=job(PLAN.task_args),
    threads: resource("gradient", "threads")
    resources:
        gpu=resource("gradient", "gpu"),
        slurm_partition=partition("gradient"),
        mem_mb=resource("gradient", "mem_mb"),
        runtime=runtime("gradient", fm_plan.GRADIENT_LOG),
    log:
        fm_plan.GRADIENT_LOG,
    benchmark:
        fm_plan.GRADIENT_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap gradient-similarity --base {input.base:q} "
        "--matrix {input.matrix:q} --shards {input.shards:q} --tasks {params.tasks:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"
