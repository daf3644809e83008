# Forgetting less (paper §6) and the mitigation arena: arms fine-tuned on the test tasks with replay, token
# masks, example weights, LoRA, anchors, freezing or EMA (a swept knob inside one job), every fine-tune and
# its interpolations toward the base judged on held-out upstream examples no arm replays; fronts and tests.

mitigation_report = analysis_report(fm_plan.MITIGATION, "Forgetting less")


rule heldout_set:
    input:
        job(PLAN.shard_paths),
    output:
        fm_plan.HELDOUT,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.mitigation.heldout_settings),
    log:
        "results/logs/{model}/mitigation/heldout_set.log",
    benchmark:
        "results/benchmarks/{model}/mitigation/heldout_set.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap heldout-set --settings {params.settings:q} --shards {input:q} --out {output:q} > {log:q} 2>&1"


rule token_losses:
    input:
        base=fm_plan.BASE,
        task=job(PLAN.task_path),
    output:
        fm_plan.TOKEN_LOSSES,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.mitigation.token_loss_settings),
    threads: resource("score", "threads")
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=runtime("score", fm_plan.TOKEN_LOSSES_LOG),
    log:
        fm_plan.TOKEN_LOSSES_LOG,
    benchmark:
        fm_plan.TOKEN_LOSSES_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap token-losses --base {input.base:q} --task {input.task:q} --settings {params.settings:q} "
        "--threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"


rule replay_selection:
    input:
        unpack(job(PLAN.mitigation.replay_inputs)),
    output:
        fm_plan.REPLAY,
    wildcard_constraints:
        model=COMPUTED,
        arm=REPLAY_ARMS,
    params:
        settings=settings(PLAN.mitigation.replay_settings),
        scores=optional_inputs("prediction", "matrix", "forecast"),
    log:
        "results/logs/{model}/mitigation/{arm}/seed-{seed}/replay/{task}.log",
    benchmark:
        "results/benchmarks/{model}/mitigation/{arm}/seed-{seed}/replay/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap replay-selection --settings {params.settings:q} --heldout {input.heldout:q} "
        "--shards {input.shards:q} --task {input.task:q} {params.scores} --out {output:q} > {log:q} 2>&1"


rule arm_run:
    input:
        unpack(job(PLAN.mitigation.arm_inputs)),
    output:
        checkpoint=checkpoint_output(fm_plan.ARM_CHECKPOINT),
        scores=fm_plan.ARM_SCORES,
        summary=fm_plan.ARM_SCORES.replace(".parquet", ".json"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.mitigation.arm_settings),
        score_settings=settings(PLAN.score_settings),
        alphas=settings(PLAN.mitigation.alphas),
        options=optional_inputs("replay", "token_losses", "matrix", "split", "shards"),
    threads: resource("finetune", "threads")
    resources:
        gpu=resource("finetune", "gpu"),
        slurm_partition=partition("finetune"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=runtime("finetune", fm_plan.ARM_LOG),
    log:
        fm_plan.ARM_LOG,
    benchmark:
        fm_plan.ARM_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap arm --base {input.base:q} --task {input.task:q} --heldout {input.heldout:q} {params.options} "
        "--settings {params.settings:q} --score-settings {params.score_settings:q} --threads {threads} "
        "--gpus {resources.gpu} --out {output.checkpoint:q} --scores {output.scores:q} "
        "--summary {output.summary:q} --alphas {params.alphas:q} > {log:q} 2>&1"


rule plain_scores:
    input:
        unpack(job(PLAN.mitigation.plain_inputs)),
    output:
        scores=fm_plan.PLAIN_SCORES,
        summary=fm_plan.PLAIN_SCORES.replace(".parquet", ".json"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.score_settings),
        alphas=settings(PLAN.mitigation.alphas),
    threads: resource("score", "threads")
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=runtime("score", fm_plan.PLAIN_LOG),
    log:
        fm_plan.PLAIN_LOG,
    benchmark:
        fm_plan.PLAIN_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap evaluate-arm --model-dir {input.model:q} --base {input.base:q} --heldout {input.heldout:q} "
        "--task {input.task:q} --settings {params.settings:q} --threads {threads} --gpus {resources.gpu} "
        "--out {output.scores:q} --summary {output.summary:q} --alphas {params.alphas:q} > {log:q} 2>&1"


rule mitigation_summary:
    input:
        unpack(job(PLAN.mitigation.summary_inputs)),
    output:
        summary=mitigation_report("summary.tsv", "mitigation_summary"),
        tests=mitigation_report("tests.tsv", "mitigation_tests"),
        forgetting=mitigation_report("forgetting.png", "mitigation_forgetting"),
        slopes=mitigation_report("paired.png", "mitigation_paired"),
        tradeoff=mitigation_report("tradeoff.png", "mitigation_tradeoff"),
        per_token=mitigation_report("per_token.png", "mitigation_per_token"),
        fronts=mitigation_report("fronts.tsv", "mitigation_fronts"),
        costs=mitigation_report("costs.tsv", "mitigation_costs"),
        predictors=mitigation_report("predictors.tsv", "mitigation_predictors"),
        fronts_figure=mitigation_report("fronts.png", "mitigation_fronts_figure"),
        protection=mitigation_report("protection.tsv", "mitigation_protection"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.mitigation.summary_settings),
        transitions=optional_inputs("transitions"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/mitigation/summary.log",
    benchmark:
        "results/benchmarks/{model}/mitigation/summary.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap mitigation-summary --matrix {input.matrix:q} --settings {params.settings:q} "
        "--summary {output.summary:q} --tests {output.tests:q} --forgetting-figure {output.forgetting:q} "
        "--paired-figure {output.slopes:q} --tradeoff-figure {output.tradeoff:q} "
        "--per-token-figure {output.per_token:q} --fronts {output.fronts:q} --costs {output.costs:q} "
        "--predictors {output.predictors:q} --fronts-figure {output.fronts_figure:q} "
        "--protection {output.protection:q} {params.transitions} "
        "> {log:q} 2>&1"
