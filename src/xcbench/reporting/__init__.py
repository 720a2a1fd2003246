"""Rendering of cached results into tables, figures, claims and the report (RENDERERS registry)."""

from xcbench.registry import import_submodules

import_submodules(__name__)  # every module in this folder registers its renderers
