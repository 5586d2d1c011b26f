"""Hyperparameter sweeps on Optuna: the search space, the study journal, the trial runner.

`trainforge sweep CONFIG --space SPACE.yaml --trials N` searches the fields a space file
names. The study lives in an Optuna journal file inside the sweep folder (`runs/NAME/`), so
no database server is needed and every process that can read the folder (K local workers,
the tasks of a Slurm job array, the web app) takes part in the same study. Each trial is an
ordinary run folder (`runs/NAME/trial-NNN/`) trained by `trainforge train` in a child
process: its recipe is recorded, `trainforge train --resume` continues it, and a trial whose
process died resumes from its checkpoint when the sweep goes on.

Modules: `space` (the space file, validated against the run-config schema), `study` (the
sweep folder, its journal and what the study holds), `sampler` (each trial's point, keyed by
(seed, trial number), never one the journal holds), `trial` (one trial's child process),
`latency` (an edge sweep's export and batch-1 timing of a trial),
`pruning` (the callback that reports validations to the pruner, inside the child), `runner`
(the loop that pulls trials), `summary` (status table, summary.csv, summary.md),
`report` (report.html), `slurm` (the job-array script), `cli` (`trainforge sweep`).
"""
