"""Starting training jobs elsewhere: Slurm batch scripts that run torchrun under srun.

`slurm` renders and submits the sbatch script; `cli` is the `trainforge slurm` command.
The processes the script starts are plain `trainforge train` runs: the distributed engine
reads torchrun's environment, and the training loop owns checkpoints, signals and requeue.
"""
