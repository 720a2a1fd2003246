"""Samplers (SAMPLERS registry) for sampled softmax; interface in samplers/base.py."""

from xcbench.samplers import kernel_tree, simple  # noqa: F401  (registers)
from xcbench.samplers.base import Sampler  # noqa: F401
