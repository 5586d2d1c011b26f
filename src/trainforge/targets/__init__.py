"""Where a run executes: `local` (this machine), Slurm on this login node, or Slurm on a
login node reached over SSH. A target is a few lines of YAML in the user's targets file;
`trainforge targets list|add|check` manage them. See `spec` (the fields), `store` (the file),
`remote` (running a command on a target) and `check` (what `targets check` proves).
"""

from trainforge.targets.spec import LOCAL, Target
from trainforge.targets.store import default_path, load_targets

__all__ = ["LOCAL", "Target", "default_path", "load_targets"]
