"""Output layers (HEADS registry): one class per method, one interface (heads/base.py)."""

from xcbench.heads.base import Head, LinearHead, multi_hot  # noqa: F401
from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
