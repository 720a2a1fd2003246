"""Rendering of cached results into tables, figures, claims and the report (RENDERERS registry)."""

from xcbench.reporting import figures, tables  # noqa: F401  (registers)
