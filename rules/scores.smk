# Per-example NLL of every upstream shard under every run, and the forgetting matrix per model.


rule score:
    input:
        model=lambda wc: model_dir(wc.model, wc.run),
        shard=lambda wc: f"results/data/upstream/{corpus_of(wc.model)}/shard-{wc.shard}.parquet",
    output:
        "results/{model}/scores/{run}/shard-{shard}.parquet",
    params:
        settings=lambda wc: as_json(fm_config.score_settings(CFG, wc.model)),
    threads: lambda wc: CFG["models"][wc.model]["resources"]["score"]["threads"]
    resources:
        gpu=resource("score", "gpu"),
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


def _matrix_tasks(model):
    tasks = TASKS[model]
    categories = {t: CFG["tasks"][t]["category"] for t in tasks}
    groups = {c: CFG["categories"][c]["group"] for c in set(categories.values())}
    return {"tasks": tasks, "categories": categories, "groups": groups}


rule forgetting_matrix:
    input:
        shards=lambda wc: shard_paths(wc.model),
        base=lambda wc: score_paths(wc.model, "base"),
        tasks=lambda wc: [p for t in TASKS[wc.model] for p in score_paths(wc.model, t)],
    output:
        "results/{model}/forgetting.parquet",
    wildcard_constraints:
        model=_alternatives(COMPUTED),
    params:
        tasks=lambda wc: as_json(_matrix_tasks(wc.model)),
        scores_dir=lambda wc: f"results/{wc.model}/scores",
    log:
        "results/logs/{model}/forgetting_matrix.log",
    benchmark:
        "results/benchmarks/{model}/forgetting_matrix.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap forgetting-matrix --model {wildcards.model:q} --scores-dir {params.scores_dir:q} "
        "--tasks {params.tasks:q} --shards {input.shards:q} --out {output:q} > {log:q} 2>&1"
