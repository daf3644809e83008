# Upstream shards and task files: the data contracts every model reads.


rule shard_upstream:
    input:
        get_corpus_file,
    output:
        fm_plan.SHARD,
    params:
        settings=get_settings("shard_upstream"),
    log:
        "results/logs/data/upstream/{corpus}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/data/upstream/{corpus}/shard-{shard}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap shard-upstream --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"


rule prepare_task:
    input:
        get_task_inputs,
    output:
        fm_plan.TASK,
    params:
        settings=get_settings("prepare_task"),
    log:
        "results/logs/data/tasks/{task}.log",
    benchmark:
        "results/benchmarks/data/tasks/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prepare-task --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"
