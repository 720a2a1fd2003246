"""Selectors (SELECTORS registry) for selective softmax; interface in selectors/base.py."""

from xcbench.selectors.base import Selector  # noqa: F401
