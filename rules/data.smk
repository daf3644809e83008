# Upstream shards and task files: the data contracts every model reads.


rule shard_upstream:
    input:
        lambda wc: (
            ancient(CFG["upstream"][wc.corpus]["path"])
            if CFG["upstream"][wc.corpus]["format"] != "demo"
            else []
        ),
    output:
        "results/data/upstream/{corpus}/shard-{shard}.parquet",
    params:
        corpus=lambda wc: as_json(corpus_spec(wc.corpus)),
        first=lambda wc: SHARDS[wc.corpus][int(wc.shard)]["first"],
        n_examples=lambda wc: SHARDS[wc.corpus][int(wc.shard)]["count"],
        digest=lambda wc: SHARDS[wc.corpus][int(wc.shard)]["digest"],
    log:
        "results/logs/data/upstream/{corpus}/shard-{shard}.log",
    benchmark:
        "results/benchmarks/data/upstream/{corpus}/shard-{shard}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap shard-upstream --corpus {params.corpus:q} --first {params.first} "
        "--count {params.n_examples} --out {output:q} > {log:q} 2>&1"


def _task_inputs(wc):
    spec = CFG["tasks"][wc.task]
    return [p for p in (spec["path"], spec["validation_path"]) if p]


rule prepare_task:
    input:
        _task_inputs,
    output:
        "results/data/tasks/{task}.parquet",
    params:
        spec=lambda wc: as_json(
            {k: v for k, v in CFG["tasks"][wc.task].items() if k != "finetune"}
        ),
        seed=CFG["seed"],
        demo_seed=CFG["demo_seed"],
    log:
        "results/logs/data/tasks/{task}.log",
    benchmark:
        "results/benchmarks/data/tasks/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prepare-task --name {wildcards.task:q} --spec {params.spec:q} "
        "--seed {params.seed} --demo-seed {params.demo_seed} --out {output:q} > {log:q} 2>&1"
