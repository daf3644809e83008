# Forecasting a new task's forgetting from k scored probes: one fine-tune and one k-example scoring job per
# forecast task instead of a scoring job per upstream shard; rows completed by a method fitted on the
# measured tasks, with conformal intervals (and scored against the measurement for `check` tasks).

forecast_report = analysis_report(fm_plan.FORECAST, "Forecast")


rule forecast_probes:
    input:
        unpack(job(PLAN.forecast.probes_inputs)),
    output:
        fm_plan.FORECAST_PROBES,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.forecast.probes_settings),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forecast/probes.log",
    benchmark:
        "results/benchmarks/{model}/forecast/probes.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap forecast-probes --settings {params.settings:q} "
        "--shards {input.shards:q} --scores {input.scores:q} --out {output:q} > {log:q} 2>&1"


rule forecast_scores:
    input:
        unpack(job(PLAN.forecast.scores_inputs)),
    output:
        fm_plan.FORECAST_SCORES,
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.forecast.score_settings),
    threads: resource("score", "threads")
    resources:
        gpu=resource("score", "gpu"),
        slurm_partition=partition("score"),
        mem_mb=resource("score", "mem_mb"),
        runtime=runtime("score", fm_plan.FORECAST_SCORES_LOG),
    log:
        fm_plan.FORECAST_SCORES_LOG,
    benchmark:
        "results/benchmarks/{model}/forecast/scores/{task}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap score --model-dir {input.model:q} --shard {input.shard:q} --settings {params.settings:q} "
        "--threads {threads} --gpus {resources.gpu} --out {output:q} > {log:q} 2>&1"


rule forecast:
    input:
        unpack(job(PLAN.forecast.forecast_inputs)),
    output:
        rows=fm_plan.FORECAST.replace("{name}", "forecast.parquet"),
        summary=forecast_report("summary.tsv", "forecast_summary"),
        figure=forecast_report("forecast.png", "forecast_figure"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.forecast.forecast_settings),
        transitions=optional_inputs("transitions"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forecast/forecast.log",
    benchmark:
        "results/benchmarks/{model}/forecast/forecast.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap forecast --settings {params.settings:q} --matrix {input.matrix:q} "
        "--probes {input.probes:q} --scores {input.scores:q} --base-scores {input.base_scores:q} "
        "--out {output.rows:q} --summary {output.summary:q} --figure {output.figure:q} {params.transitions} "
        "> {log:q} 2>&1"


rule forecast_trajectory:  # monitored fine-tunes (finetune.monitor): each check's probes completed into a row
    input:
        unpack(job(PLAN.forecast.trajectory_inputs)),
    output:
        table=forecast_report("trajectory.tsv", "forecast_trajectory"),
        figure=forecast_report("trajectory.png", "forecast_trajectory_figure"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.forecast.trajectory_settings),
        transitions=optional_inputs("transitions", "base_scores"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forecast/trajectory.log",
    benchmark:
        "results/benchmarks/{model}/forecast/trajectory.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap forecast-trajectory --settings {params.settings:q} "
        "--matrix {input.matrix:q} --probes {input.probes:q} --checkpoints {input.checkpoints:q} "
        "--out {output.table:q} --figure {output.figure:q} {params.transitions} > {log:q} 2>&1"


rule forecast_before:  # tasks marked `forecast: before`: their rows from the map and their text, nothing fine-tuned
    input:
        unpack(job(PLAN.forecast.before_inputs)),
    output:
        rows=fm_plan.FORECAST.replace("{name}", "before.parquet"),
        summary=forecast_report("before_summary.tsv", "forecast_before"),
    wildcard_constraints:
        model=COMPUTED,
    params:
        settings=settings(PLAN.forecast.before_settings),
        tasks=arguments(PLAN.forecast.before_arguments),
    threads: resource("semantic", "threads")
    resources:
        gpu=resource("semantic", "gpu"),
        slurm_partition=partition("semantic"),
        mem_mb=resource("semantic", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/forecast/before.log",
    benchmark:
        "results/benchmarks/{model}/forecast/before.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap forecast-before --matrix {input.matrix:q} --shards {input.shards:q} "
        "--tasks {params.tasks} --settings {params.settings:q} --threads {threads} --out {output.rows:q} "
        "--summary {output.summary:q} > {log:q} 2>&1"
