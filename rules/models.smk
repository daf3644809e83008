# The base model of each model, and one fine-tune per (model, task).


rule base_model:
    output:
        directory(fm_plan.BASE),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("base_model"),
    threads: get_resource("base", "threads")
    resources:
        gpu=get_resource("base", "gpu"),
        mem_mb=get_resource("base", "mem_mb"),
        runtime=get_resource("base", "runtime"),
    log:
        "results/logs/{model}/base_model.log",
    benchmark:
        "results/benchmarks/{model}/base_model.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap base-model --settings {params.settings:q} --threads {threads} --gpus {resources.gpu} "
        "--out {output:q} > {log:q} 2>&1"


rule finetune:
    input:
        base=fm_plan.BASE,
        task=fm_plan.TASK,
    output:
        checkpoint_output(fm_plan.CHECKPOINT),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=get_settings("finetune"),
    threads: get_resource("finetune", "threads")
    resources:
        gpu=get_resource("finetune", "gpu"),
        mem_mb=get_resource("finetune", "mem_mb"),
        runtime=get_resource("finetune", "runtime"),
    log:
        "results/logs/{model}/finetune/{task}.log",
    benchmark:
        "results/benchmarks/{model}/finetune/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap finetune --base {input.base:q} --task {input.task:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"
