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
RAW_FORMATS = {"xc_bow"}  # formats whose samples are not feature vectors: an experiment's `features:` extractor applies


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


def features_path(features: dict | None, entry: dict, data: str | Path = "data") -> str | None:
    """Where the fixed features a run reads are built: <data>/features/<dataset>/<extractor><dim>.pt, from the
    experiment's `features: {extractor, dim}` (dim 512 where unset); None where the experiment names no extractor
    or the dataset's samples are feature vectors already (its format is not in RAW_FORMATS). The DAG's feature
    rule, `xcbench train`'s error for a missing --features and the benchmarks that retrain runs all read it here."""
    if not features or entry["format"] not in RAW_FORMATS:
        return None
    return f"{data}/features/{entry['name']}/{features['extractor']}{features.get('dim', 512)}.pt"
