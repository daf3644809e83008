# The base model of each model, one fine-tune per (model, task), and a pointer per checkpoint it did not train.


rule base_model:
    output:
        directory(fm_plan.BASE),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.base_settings),
    threads: resource("base", "threads")
    resources:
        gpu=resource("base", "gpu"),
        slurm_partition=partition("base"),
        mem_mb=resource("base", "mem_mb"),
        runtime=runtime("base", fm_plan.BASE_LOG),
    log:
        fm_plan.BASE_LOG,
    benchmark:
        fm_plan.BASE_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap base-model --settings {params.settings:q} --threads {threads} --gpus {resources.gpu} "
        "--out {output:q} > {log:q} 2>&1"


rule finetune:
    input:
        unpack(job(PLAN.finetune_inputs)),
    output:
        checkpoint_output(fm_plan.CHECKPOINT),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.finetune_settings),
        probes=optional_inputs("probes", "shards"),
    threads: resource("finetune", "threads")
    resources:
        gpu=resource("finetune", "gpu"),
        slurm_partition=partition("finetune"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=runtime("finetune", fm_plan.FINETUNE_LOG),
    log:
        fm_plan.FINETUNE_LOG,
    benchmark:
        fm_plan.FINETUNE_BENCH
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap finetune --base {input.base:q} --task {input.task:q} {params.probes} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"


rule posttrained:  # a checkpoint the user did not train: a pointer, no fine-tune
    output:
        directory(fm_plan.POSTTRAINED),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.checkpoint_settings),
    localrule: True
    log:
        "results/logs/{model}/posttrained/{checkpoint}.log",
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap checkpoint --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"
