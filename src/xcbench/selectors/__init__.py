"""Selectors (SELECTORS registry) for selective softmax; interface in selectors/base.py."""

from xcbench.selectors.base import Selector  # noqa: F401
from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its entries
