"""Tasks (TASKS registry): data batches + evaluation protocol per kind of problem."""

from xcbench.tasks import lm, multiclass, probes, xmc  # noqa: F401  (registers)
