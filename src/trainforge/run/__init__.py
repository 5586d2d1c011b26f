"""The parts of one training run that the train entry (`trainforge.train`) composes and
that belong to no lower package: the recipe's identity (`recipe`), where the run starts
(`resume`), its callbacks (`callbacks`, shared with pruning's fine-tune), the lines it
prints at start (`header`) and what it leaves behind (`outputs`).

This package sits above `engine`, `tasks` and `observe` so that the training loop imports
neither: the loop knows callbacks and tasks only through their protocols.
"""
