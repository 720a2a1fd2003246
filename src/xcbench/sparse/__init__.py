"""Sparse output layers: fixed fan-in (uniform) and unstructured COO, with SET rewiring."""

