# Per-example NLL of every upstream shard under every run, and the forgetting matrix per model.


rule score:
    input:
        model=job(PLAN.checkpoint),
        shard=job(PLAN.shard_path),
    output:
        fm_plan.SCORES,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.run_score_settings),
    threads: resource("score", "threads")
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=resource("score", "runtime"),
    log:
        "results/logs/{model}/score/{run}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/{model}/score/{run}/shard-{shard}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap score --model-dir {input.model:q} --shard {input.shard:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"


rule forgetting_matrix:
    input:
        shards=job(PLAN.shard_paths),
        scores=job(PLAN.all_scores),
    output:
        fm_plan.MATRIX,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.matrix_settings),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forgetting_matrix.log",
    benchmark:
        "results/benchmarks/{model}/forgetting_matrix.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap forgetting-matrix --settings {params.settings:q} --shards {input.shards:q} "
        "--out {output:q} > {log:q} 2>&1"
