"""Weight optimizers and learning-rate schedules (OPTIMIZERS registry).

Dual-variable rules of the SCENT family have their own registry, `optim.duals.DUALS`.
"""

from xcbench.optim import duals, lazy_adam, row_sgd, weights  # noqa: F401  (registers)
