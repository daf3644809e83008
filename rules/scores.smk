# Per-example NLL of every upstream shard under every run, and the forgetting matrix per model; a row whose
# correctness comes from the user's evaluation logs gets its score files from those instead.


rule score:
    input:
        model=job(PLAN.checkpoint),
        shard=job(PLAN.shard_path),
    output:
        fm_plan.SCORES,
    wildcard_constraints:
        model=COMPUTED,
        run=SCORED_RUNS,
    params:
        settings=settings(PLAN.run_score_settings),
    threads: resource("score", "threads")
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=runtime("score", fm_plan.SCORE_LOG),
    log:
        fm_plan.SCORE_LOG,
    benchmark:
        fm_plan.SCORE_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap score --model-dir {input.model:q} --shard {input.shard:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"


use rule score as score_cells with:  # a fractional map's run: its cells only, those on disk read again
    output:
        fm_plan.SCORES_CELLS,
    params:
        settings=settings(PLAN.cell_score_settings),
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=runtime("score", fm_plan.SCORE_CELLS_LOG),
    log:
        fm_plan.SCORE_CELLS_LOG,
    benchmark:
        fm_plan.SCORE_CELLS_BENCH


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


rule eval_log:  # a row whose correctness the user's evaluation logs give: aligned with the upstream items
    input:
        logs=job(PLAN.log_files),
        shards=job(PLAN.shard_paths),
    output:
        fm_plan.LOGGED,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.log_settings),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/eval_log/{logged}.log",
    benchmark:
        "results/benchmarks/{model}/eval_log/{logged}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap eval-log --settings {params.settings:q} --shards {input.shards:q} --out {output:q} > {log:q} 2>&1"


rule logged_scores:  # an eval-log row's items of one shard, as a score file (correctness only, no NLL)
    input:
        table=fm_plan.LOGGED.replace("{logged}", "{run}"),
        shard=job(PLAN.shard_path),
    output:
        fm_plan.SCORES,
    wildcard_constraints:
        model=COMPUTED,
        run=LOGGED_RUNS,
    localrule: True
    log:
        "results/logs/{model}/logged_scores/{run}/shard-{shard}.log",
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap logged-scores --table {input.table:q} --shard {input.shard:q} --out {output:q} > {log:q} 2>&1"
