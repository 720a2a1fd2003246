"""Weight optimizers and learning-rate schedules (OPTIMIZERS registry).

Dual-variable rules of the SCENT family have their own registry, `optim.duals.DUALS`.
"""

from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
