"""Weight optimizers and learning-rate schedules (OPTIMIZERS registry).

Dual-variable rules (SCENT family) register here too when they land.
"""

from xcbench.optim import weights  # noqa: F401  (registers)
