"""Configuration files: schemas reject unknown keys; scales merge onto the base."""

import pytest

from xcbench.config import ConfigError, ROOT, load_datasets, load_experiment, resolve_experiment, validate
from xcbench.io import write_yaml

from conftest import TINY_EXP


def test_every_shipped_experiment_resolves_at_every_scale():
    files = sorted((ROOT / "config" / "experiments").glob("*/*.yaml"))
    assert files
    for f in files:
        for scale in ("tiny", "quick", "paper"):
            exp = resolve_experiment(load_experiment(f), scale)
            assert exp["methods"] and exp["datasets"] and exp["scale"] == scale


def test_every_dataset_used_is_catalogued():
    cat = load_datasets()
    for f in sorted((ROOT / "config" / "experiments").glob("*/*.yaml")):
        for scale in ("tiny", "quick", "paper"):
            for d in resolve_experiment(load_experiment(f), scale)["datasets"]:
                assert d in cat, f"{f}: {d} not in config/datasets.yaml"


def test_catalogue_entries_are_complete():
    for name, e in load_datasets().items():
        if "generator" in e:
            continue
        assert e.get("files") or e.get("available") is False, name
        if e.get("available") is False:
            assert e.get("stand_in") or e.get("note"), f"{name}: unobtainable without a stand-in"


def test_scale_override_merges(tmp_path):
    exp = {**{k: v for k, v in TINY_EXP.items() if k != "scale"},
           "scales": {"quick": {"train": {"epochs": 9}, "datasets": ["bibtex"]}}}
    write_yaml(tmp_path / "e.yaml", exp)
    r = resolve_experiment(load_experiment(tmp_path / "e.yaml"), "quick")
    assert r["train"]["epochs"] == 9 and r["train"]["lr"] == TINY_EXP["train"]["lr"] and r["datasets"] == ["bibtex"]
    assert resolve_experiment(load_experiment(tmp_path / "e.yaml"), "tiny")["train"]["epochs"] == 3


@pytest.mark.parametrize("where", ["top", "train", "scale"])
def test_unknown_experiment_key_is_an_error(tmp_path, where):
    exp = {k: v for k, v in TINY_EXP.items() if k != "scale"}
    if where == "top":
        exp["epochz"] = 3
    elif where == "train":
        exp["train"] = {**exp["train"], "epochz": 3}
    else:
        exp["scales"] = {"quick": {"epochz": 3}}
    write_yaml(tmp_path / "bad.yaml", exp)
    with pytest.raises(ConfigError, match=r"bad.yaml.*epochz"):
        load_experiment(tmp_path / "bad.yaml")


def test_unknown_config_key_is_an_error():
    with pytest.raises(ConfigError, match="bogus"):
        validate({"scale": "quick", "bogus": 1}, "config.schema.yaml", "config/config.yaml")
    with pytest.raises(ConfigError, match="huge"):
        validate({"scale": "huge"}, "config.schema.yaml", "config/config.yaml")


def test_unknown_scale():
    with pytest.raises(ConfigError, match="scale"):
        resolve_experiment(TINY_EXP, "medium")
