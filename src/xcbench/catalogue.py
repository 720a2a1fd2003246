"""The dataset catalogue: `config/datasets.yaml`, one entry per dataset (its files, origin URLs, sha256, reader).

The catalogue of the checkout the command runs in is the one a user extends; a wheel installed outside a checkout
reads the copy shipped in the package (`src/xcbench/datasets.yaml`, which config/datasets.yaml links to). Every
entry is validated against `schemas/datasets.schema.yaml`, so a misspelt key names the file.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.io import read_yaml
from xcbench.schema import ConfigError, validate

CATALOGUE = Path(__file__).resolve().parent / "datasets.yaml"  # config/datasets.yaml links here


def default_catalogue() -> Path:
    """config/datasets.yaml of the checkout the command runs in (where a user adds datasets), else the
    catalogue shipped in the package (a wheel install used outside a checkout)."""
    local = Path("config") / "datasets.yaml"
    return local if local.is_file() else CATALOGUE


def load_datasets(path: str | Path | None = None) -> dict[str, dict]:
    path = Path(path) if path else default_catalogue()
    cat = read_yaml(path)
    validate(cat, "datasets.schema.yaml", path)
    for name, entry in cat.items():
        entry["name"] = name
    return cat


def dataset_entry(name: str, catalogue: dict[str, dict]) -> dict:
    if name not in catalogue:
        raise ConfigError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(catalogue))} "
                          "(add it to config/datasets.yaml)")
    return catalogue[name]
