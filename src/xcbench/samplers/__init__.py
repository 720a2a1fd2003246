"""Samplers (SAMPLERS registry) for sampled softmax; interface in samplers/base.py."""

from xcbench.samplers.base import Sampler  # noqa: F401
