"""What a job costs before it runs, in one place: how long, on which device, and from which figures.

- `work`: what one job computes (FLOPs and passes per kind of work, weights loaded, examples tokenized, setups);
- `lengths`: its examples' lengths as its job tokenizes them, before the data exists where that is cheap to know;
- `jobs`: each job of a plan, its work counted from its settings and data, and the device it runs on;
- `rates`: the rates file of measured figures; `cards`: the GPUs' memory, peak and bandwidth;
- `figures`: the one policy that gives a device its figures (own, probe-scaled, spec-scaled, borrowed) and a job's
  seconds from them;
- `probe` and `harness`: the CPU probe and the work it and `forgetmap calibrate` time;
- `learned`: the run's finished jobs, read; `estimate`: the plan's rows and SLURM times; `table`: the time table.

It imports neither the config package nor the plan: the plan asks it (forgetmap.plan.Plan.job_times).
"""
