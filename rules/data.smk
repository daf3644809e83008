# Upstream shards and task files: the data contracts every model reads.


rule shard_upstream:
    input:
        lambda wc: [ancient(p) for p in PLAN.corpus_file(wc.corpus)],
    output:
        fm_plan.SHARD,
    params:
        settings=settings(PLAN.shard_settings),
    log:
        "results/logs/data/upstream/{corpus}/shard-{shard}.{key}.log",
    benchmark:
        "results/benchmarks/data/upstream/{corpus}/shard-{shard}.{key}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap shard-upstream --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"


rule prepare_task:
    input:
        job(PLAN.task_inputs),
    output:
        fm_plan.TASK,
    params:
        settings=settings(PLAN.task_settings),
    log:
        "results/logs/data/tasks/{task}.{key}.log",
    benchmark:
        "results/benchmarks/data/tasks/{task}.{key}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prepare-task --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"
