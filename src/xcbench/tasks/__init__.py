"""Tasks (TASKS registry): data batches + evaluation protocol per kind of problem."""

from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
