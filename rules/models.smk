# The base model of each model, and one fine-tune per (model, task).


rule base_model:
    output:
        directory("results/{model}/base"),
    params:
        settings=lambda wc: as_json(fm_config.base_settings(CFG, wc.model)),
    threads: lambda wc: CFG["models"][wc.model]["resources"]["base"]["threads"]
    resources:
        gpu=resource("base", "gpu"),
        mem_mb=resource("base", "mem_mb"),
        runtime=resource("base", "runtime"),
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
        base="results/{model}/base",
        task="results/data/tasks/{task}.parquet",
    output:
        checkpoint_output("results/{model}/checkpoints/{task}"),
    params:
        settings=lambda wc: as_json(fm_config.finetune_settings(CFG, wc.model, wc.task)),
    threads: lambda wc: CFG["models"][wc.model]["resources"]["finetune"]["threads"]
    resources:
        gpu=resource("finetune", "gpu"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=resource("finetune", "runtime"),
    log:
        "results/logs/{model}/finetune/{task}.log",
    benchmark:
        "results/benchmarks/{model}/finetune/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap finetune --base {input.base:q} --task {input.task:q} "
        "--settings {params.settings:q} --threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"
