"""dsanalyze: a differential data-stall analyzer for deep-learning training jobs.

`dsanalyze.instrument(loader)` times a training script's loader explicitly
(see `dsanalyze.instrument.api`); the harness does the same for an
unmodified script. Importing `dsanalyze` imports neither torch nor DALI.
"""

from dsanalyze import instrument

__all__ = ["instrument"]
