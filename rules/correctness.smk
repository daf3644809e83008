# Sample-wise correctness (1->0 forgetting, 0->1 backward transfer) of the upstream items with an answer:
# the score jobs already stored each run's correctness; these rules compare the runs, analyse and predict Y.

correctness_report = analysis_report(fm_plan.CORRECTNESS, "Sample-wise correctness")
CORRECTNESS_SHOWN = ("rates", "rates_figure", "heatmap")  # the transitions outputs in the report


rule transitions:
    input:
        shards=job(PLAN.shard_paths),
        scores=job(PLAN.all_scores),
    output:
        **{key: correctness_report(name, f"correctness_{key}") if key in CORRECTNESS_SHOWN
           else fm_plan.CORRECTNESS.replace("{name}", name) for key, name in fm_plan.TRANSITION_OUTPUTS.items()},
    wildcard_constraints:
        model=ITEM_MODELS,
    params:
        settings=settings(PLAN.correctness.transitions_settings),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/transitions.log",
    benchmark:
        "results/benchmarks/{model}/transitions.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap transitions --settings {params.settings:q} --shards {input.shards:q} "
        "--transitions {output.transitions:q} --forgetting {output.forgetting:q} "
        "--backward-transfer {output.backward_transfer:q} --rates {output.rates:q} "
        "--rates-figure {output.rates_figure:q} --heatmap {output.heatmap:q} > {log:q} 2>&1"


rule lowrank_binary:
    input:
        unpack(job(PLAN.correctness.lowrank_inputs)),
    output:
        **{key: correctness_report(name, f"correctness_{key}") for key, name in fm_plan.BINARY_LOWRANK_OUTPUTS.items()},
    wildcard_constraints:
        model=Y_MODELS,
    params:
        matrix=optional_inputs("matrix"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/lowrank_binary.log",
    benchmark:
        "results/benchmarks/{model}/lowrank_binary.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} forgetmap lowrank-binary {params.matrix} "
        "--forgetting {input.forgetting:q} --ranks {output.ranks:q} --point-biserial {output.point_biserial:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"


rule predict_binary:
    input:
        unpack(job(PLAN.correctness.predict_inputs)),
    output:
        predictions=directory(fm_plan.BINARY_PREDICTIONS),
        metrics=fm_plan.BINARY_PREDICTION_METRICS,
    wildcard_constraints:
        model=Y_MODELS,
    params:
        settings=settings(PLAN.correctness.predict_settings),
        matrix=optional_inputs("matrix"),
    threads: resource("analysis", "threads")
    resources:
        mem_mb=resource("analysis", "mem_mb"),
        runtime=resource("analysis", "runtime"),
    log:
        "results/logs/{model}/predict_binary/{split}/{binary_method}.log",
    benchmark:
        "results/benchmarks/{model}/predict_binary/{split}/{binary_method}.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "OMP_NUM_THREADS={threads} OPENBLAS_NUM_THREADS={threads} forgetmap predict-binary "
        "--forgetting {input.forgetting:q} --split {input.split:q} --settings {params.settings:q} "
        "--out {output.predictions:q} --metrics {output.metrics:q} {params.matrix} > {log:q} 2>&1"


rule binary_prediction_scores:
    input:
        job(PLAN.correctness.metrics),
    output:
        table=report(
            fm_plan.BINARY_PREDICTION_SCORES,
            caption="../workflow/report/correctness_prediction.rst",
            category="Sample-wise correctness",
            subcategory="{model}",
        ),
        figure=report(
            fm_plan.BINARY_PREDICTION_SCORES.replace(".tsv", ".png"),
            caption="../workflow/report/correctness_prediction_figure.rst",
            category="Sample-wise correctness",
            subcategory="{model}",
        ),
    wildcard_constraints:
        model=Y_MODELS,
    log:
        "results/logs/{model}/binary_prediction_scores.log",
    benchmark:
        "results/benchmarks/{model}/binary_prediction_scores.tsv"
    conda:
        "../envs/forgetmap.yaml"
    shell:
        "forgetmap prediction-scores --binary --metrics {input:q} --out {output.table:q} "
        "--figure {output.figure:q} > {log:q} 2>&1"
