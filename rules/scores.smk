# Per-example NLL of every upstream shard under every run, and the forgetting matrix per model.


rule score:
    input:
        model=get_checkpoint,
        shard=get_shard,
    output:
        fm_plan.SCORES,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("score"),
    threads: get_resource("score", "threads")
    resources:
        gpu=get_resource("score", "gpu"),
        mem_mb=get_resource("score", "mem_mb"),
        runtime=get_resource("score", "runtime"),
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
        shards=get_shards,
        scores=get_matrix_scores,
    output:
        fm_plan.MATRIX,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("forgetting_matrix"),
    threads: get_resource("analysis", "threads")
    resources:
        mem_mb=get_resource("analysis", "mem_mb"),
        runtime=get_resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forgetting_matrix.log",
    benchmark:
        "results/benchmarks/{model}/forgetting_matrix.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap forgetting-matrix --settings {params.settings:q} --shards {input.shards:q} "
        "--out {output:q} > {log:q} 2>&1"
