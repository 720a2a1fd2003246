"""Samplers (SAMPLERS registry) for sampled softmax; interface in samplers/base.py."""

from xcbench.registry import import_submodules
from xcbench.samplers.base import Sampler  # noqa: F401

import_submodules(__name__)  # every module in this folder registers its entries
