"""Fixed feature extractors (FEATURES) and trainable encoders (ENCODERS)."""

from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
