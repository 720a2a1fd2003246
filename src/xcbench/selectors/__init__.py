"""Selectors (SELECTORS registry) for selective softmax; interface in selectors/base.py."""

from xcbench.registry import import_submodules
from xcbench.selectors.base import Selector  # noqa: F401

import_submodules(__name__)  # every module in this folder registers its entries
