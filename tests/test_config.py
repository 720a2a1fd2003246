"""Configuration files: schemas reject unknown keys; scales merge onto the base."""

import pytest
from conftest import TINY_EXP

from xcbench.catalogue import load_datasets
from xcbench.config import ROOT, ConfigError, load_experiment, resolve_experiment
from xcbench.io import write_yaml
from xcbench.schema import validate


def test_every_shipped_experiment_resolves_at_every_scale():
    """The one test over every experiment file at every scale: it resolves, has runs, and every dataset
    it uses is in the catalogue."""
    files = sorted((ROOT / "config" / "experiments").glob("*/*.yaml"))
    cat = load_datasets()
    assert files
    for f in files:
        for scale in ("tiny", "quick", "paper"):
            exp = resolve_experiment(load_experiment(f), scale)
            assert exp["methods"] and exp["datasets"] and exp["scale"] == scale
            for d in exp["datasets"]:
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


def test_a_loaded_experiment_is_read_again_after_an_edit_and_callers_own_their_copy(tmp_path):
    """Files are parsed and validated once per version (the DAG loads each several times): an edited
    file is read again, a broken edit is an error again, and changing a loaded dict changes no later load."""
    exp = {k: v for k, v in TINY_EXP.items() if k != "scale"}
    write_yaml(tmp_path / "e.yaml", exp)
    first = load_experiment(tmp_path / "e.yaml")
    first["train"]["lr"] = 123.0
    first["methods"]["full_softmax"]["head"] = "changed"
    again = load_experiment(tmp_path / "e.yaml")
    assert again["train"]["lr"] == TINY_EXP["train"]["lr"] and again["methods"]["full_softmax"]["head"] == "full_softmax"
    write_yaml(tmp_path / "e.yaml", {**exp, "train": {**exp["train"], "lr": 0.5}})
    assert load_experiment(tmp_path / "e.yaml")["train"]["lr"] == 0.5
    write_yaml(tmp_path / "e.yaml", {**exp, "epochz": 3})
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"e.yaml.*epochz"):
            load_experiment(tmp_path / "e.yaml")


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


def _write(tmp_path, name, obj):
    write_yaml(tmp_path / f"{name}.yaml", obj)
    return tmp_path / f"{name}.yaml"


def test_views_per_method_datasets_and_per_dataset_overrides(tmp_path):
    from xcbench.run import expected_runs
    from xcbench.runspec import method_config

    owner = {"paper": "p", "artifact": "own", "title": "t", "task": "multiclass", "seeds": [0], "datasets": ["a", "b"],
             "render": {"kind": "table", "renderer": "metric_table"},
             "model": {"encoder": {"name": "mlp", "hidden": 8}},
             "methods": {"m1": {"head": "full_softmax"}, "m2": {"head": "full_softmax", "datasets": ["a"]},
                         "m3": {"head": "full_softmax", "params": {"k": 1}}},
             "per_dataset": {"b": {"task": {"name": "lm"}, "model": {"encoder": {"name": "lstm_lm", "emb": 4}},
                                   "methods": {"m3": {"params": {"k": 2}}}}},
             "scales": {"quick": {"skip": ["m3"]}}}
    _write(tmp_path, "own", owner)
    exp = resolve_experiment(load_experiment(tmp_path / "own.yaml"), "paper")
    assert expected_runs(exp) == [("a", "m1", 0), ("a", "m2", 0), ("a", "m3", 0), ("b", "m1", 0), ("b", "m3", 0)]
    spec, _, model = method_config(exp, "b", "m3")
    assert spec["params"] == {"k": 2} and model["encoder"] == {"name": "lstm_lm", "emb": 4}  # no mlp params leak
    assert method_config(exp, "a", "m3")[0]["params"] == {"k": 1}
    view = {"paper": "p", "artifact": "view", "title": "v", "runs_of": "own", "methods": ["m3", "m1"],
            "render": {"kind": "table", "renderer": "metric_table"}, "scales": {"paper": {"datasets": ["b"]}}}
    _write(tmp_path, "view", view)
    v = resolve_experiment(load_experiment(tmp_path / "view.yaml"), "paper")
    assert list(v["methods"]) == ["m3", "m1"] and v["datasets"] == ["b"]
    q = resolve_experiment(load_experiment(tmp_path / "view.yaml"), "quick")  # the owner's quick runs m1, m2 only
    assert list(q["methods"]) == ["m1"] and q["datasets"] == ["a", "b"]
    view["methods"] = ["nope"]
    _write(tmp_path, "view", view)
    with pytest.raises(ConfigError, match="nope"):
        resolve_experiment(load_experiment(tmp_path / "view.yaml"), "paper")


def test_a_view_of_a_variant_keeps_its_own_title_and_rendering_at_every_scale(tmp_path):
    """An owner that `extends` a file with scale blocks carries its own title and render in each of them
    (`_layer`); a view of it must still render as the view says at those scales (fig1_epochs once rendered
    table2_epochs' table at the quick scale), and its runs stay the owner's (same identity, same datasets)."""
    from xcbench.run import identity, make_run

    base = {"paper": "p", "artifact": "base", "title": "base", "task": "multiclass", "seeds": [0], "datasets": ["a"],
            "render": {"kind": "table", "renderer": "metric_table"}, "methods": {"m1": {"head": "full_softmax"}},
            "scales": {"quick": {"datasets": ["q"]}}}
    _write(tmp_path, "base", base)
    _write(tmp_path, "own", {"paper": "p", "artifact": "own", "extends": "base", "title": "own",
                             "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"}})
    _write(tmp_path, "view", {"paper": "p", "artifact": "view", "runs_of": "own", "title": "view", "seeds": [0, 1],
                              "render": {"kind": "table", "renderer": "metric_table"}, "methods": ["m1"]})
    for scale, data in (("quick", ["q"]), ("paper", ["a"])):
        v = resolve_experiment(load_experiment(tmp_path / "view.yaml"), scale)
        o = resolve_experiment(load_experiment(tmp_path / "own.yaml"), scale)
        assert (v["artifact"], v["title"], v["render"], v["seeds"]) == (
            "view", "view", {"kind": "table", "renderer": "metric_table"}, [0, 1]), scale
        assert v["datasets"] == o["datasets"] == data
        assert identity(make_run(v, data[0], "m1", 1).spec) == identity(make_run(o, data[0], "m1", 1).spec)


def test_scale_method_patterns(tmp_path):
    """A scale's override keyed by a pattern reaches every method it matches, an exact name wins over
    it, a pattern that matches nothing is an error, and a pattern is no method name."""
    base = {"paper": "p", "artifact": "t", "title": "t", "task": "xmc", "datasets": ["a"], "seeds": [0],
            "render": {"kind": "table", "renderer": "metric_table"},
            "methods": {"s_a": {"head": "sampled_softmax", "params": {"m": 5}},
                        "s_b": {"head": "sampled_softmax", "params": {"m": 5}}, "full": {"head": "softmax"}},
            "scales": {"quick": {"methods": {"s_b": {"params": {"m": 9}}, "s_*": {"params": {"m": 7, "init_std": 0.5}}}}}}
    exp = resolve_experiment(load_experiment(_write(tmp_path, "t", base)), "quick")
    got = [exp["methods"][m].get("params", {}) for m in ("s_a", "s_b", "full")]
    assert got == [{"m": 7, "init_std": 0.5}, {"m": 9, "init_std": 0.5}, {}]
    base["scales"]["quick"]["methods"] = {"x_*": {"params": {"m": 7}}}
    with pytest.raises(ConfigError, match="x_\\*.*matches none"):
        resolve_experiment(load_experiment(_write(tmp_path, "t", base)), "quick")
    base["scales"] = {}
    base["methods"]["s_*"] = {"head": "softmax"}
    with pytest.raises(ConfigError, match="method name"):
        load_experiment(_write(tmp_path, "t", base))


def test_a_method_needing_a_missing_library_is_left_out_and_said(tmp_path, monkeypatch):
    """A selector that `requires` a library that is not installed: its runs are left out of the
    resolved experiment (so of the DAG, tables and claims) with the reason and install command, and
    the caption says so; the other methods are untouched."""
    from xcbench.reporting.captions import footer
    from xcbench.selectors.ann import FaissIVF

    monkeypatch.setattr(FaissIVF, "requires", "surely_not_installed_lib")
    exp = {"paper": "p", "artifact": "t", "title": "t", "task": "faces", "datasets": ["a"], "seeds": [0],
           "render": {"kind": "table", "renderer": "metric_table"},
           "methods": {"full": {"head": "full_softmax"},
                       "ivf": {"label": "IVF", "head": "selective_softmax", "params": {"selector": "faiss_ivf"}}}}
    res = resolve_experiment(load_experiment(_write(tmp_path, "t", exp)), "paper")
    assert list(res["methods"]) == ["full"] and "surely_not_installed_lib" in res["unavailable"]["ivf"]
    assert "Not run here: IVF: needs surely_not_installed_lib" in footer(res, {})
    monkeypatch.setattr(FaissIVF, "requires", None)
    assert list(resolve_experiment(load_experiment(tmp_path / "t.yaml"), "paper")["methods"]) == ["full", "ivf"]


def test_extends_with_a_method_list_picks_the_parents_runs_with_their_overrides(tmp_path):
    """`methods: [a, ...]` in a variant keeps those of the parent's methods with every override the parent
    gives them (a scale's by name and by pattern, per dataset), drops the others' overrides and skip
    entries, and names a method the parent lacks."""
    parent = {**{k: v for k, v in TINY_EXP.items() if k != "scale"}, "artifact": "base",
              "methods": {"a": {"head": "full_softmax", "params": {"init_std": 0.1}},
                          "b": {"head": "full_softmax", "params": {"init_std": 0.2}},
                          "c": {"head": "full_softmax"}},
              "per_dataset": {"synthetic-xmc-tiny": {"methods": {"a": {"params": {"init_std": 0.3}},
                                                                 "c": {"params": {"init_std": 0.4}}}}},
              "scales": {"tiny": {"skip": ["c"], "methods": {"b": {"params": {"init_std": 0.5}},
                                                           "a*": {"label": "A"}, "c": {"label": "C"}}}}}
    write_yaml(tmp_path / "base.yaml", parent)
    write_yaml(tmp_path / "v.yaml", {"paper": "test", "artifact": "v", "title": "v", "extends": "base", "methods": ["a", "b"],
                                     "train": {"epochs": 3}})
    from xcbench.runspec import method_config

    v, p = (resolve_experiment(load_experiment(tmp_path / f), "tiny") for f in ("v.yaml", "base.yaml"))
    assert list(v["methods"]) == ["a", "b"] and v["train"]["epochs"] == 3 and v["methods"]["a"]["label"] == "A"
    for m in ("a", "b"):
        assert method_config(v, "synthetic-xmc-tiny", m)[0] == method_config(p, "synthetic-xmc-tiny", m)[0]
    write_yaml(tmp_path / "w.yaml", {"paper": "test", "artifact": "w", "title": "w", "extends": "base", "methods": ["a", "z"]})
    with pytest.raises(ConfigError, match=r"\['z'\] are not methods of base"):
        load_experiment(tmp_path / "w.yaml")


def test_every_schema_key_is_documented_in_config_md():
    """Each property name of the experiment, claims, config and datasets schemas appears in docs/config.md
    in backticks: a key added to a schema without a line in the docs fails here."""
    import re

    from conftest import REPO

    from xcbench.io import read_yaml
    from xcbench.schema import SCHEMAS

    def names(node) -> set[str]:
        out = set()
        if isinstance(node, dict):
            for k, sub in (node.get("properties") or {}).items():
                out |= {k} | names(sub)
            for k in ("additionalProperties", "items"):
                out |= names(node.get(k))
            for sub in (node.get("$defs") or {}).values():
                out |= names(sub)
            for k in ("oneOf", "anyOf", "allOf"):
                for sub in node.get(k, []):
                    out |= names(sub)
        return out

    words = {w for span in re.findall(r"`([^`]*)`", (REPO / "docs" / "config.md").read_text())  # code spans, in pairs
             for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
    for schema in ("experiment", "claims", "config", "datasets"):
        missing = sorted(k for k in names(read_yaml(SCHEMAS / f"{schema}.schema.yaml")) if k not in words)
        assert not missing, f"{schema}.schema.yaml keys without a line in docs/config.md: {missing}"


def test_a_datasets_method_overrides_may_be_keyed_by_a_pattern(tmp_path):
    """`per_dataset.<d>.methods."gru_*"` applies to every method it matches on that dataset only (MIDX Table 7
    states its lr per encoder and dataset), a name given exactly wins, and a pattern matching nothing names itself."""
    from xcbench.runspec import method_config

    exp = {**{k: v for k, v in TINY_EXP.items() if k != "scale"}, "artifact": "pat",
           "datasets": ["synthetic-xmc-tiny", "other"],
           "methods": {"gru_a": {"head": "full_softmax"}, "gru_b": {"head": "full_softmax"}, "sas_a": {"head": "full_softmax"}},
           "per_dataset": {"synthetic-xmc-tiny": {"methods": {"gru_*": {"train": {"lr": 0.5}}, "gru_b": {"train": {"lr": 0.7}}}}}}
    write_yaml(tmp_path / "pat.yaml", exp)
    e = resolve_experiment(load_experiment(tmp_path / "pat.yaml"), "tiny")
    lr = {(d, m): method_config(e, d, m)[1]["lr"] for d in exp["datasets"] for m in exp["methods"]}
    base = TINY_EXP["train"]["lr"]
    assert lr == {("synthetic-xmc-tiny", "gru_a"): 0.5, ("synthetic-xmc-tiny", "gru_b"): 0.7,
                  ("synthetic-xmc-tiny", "sas_a"): base, ("other", "gru_a"): base, ("other", "gru_b"): base,
                  ("other", "sas_a"): base}
    exp["per_dataset"]["other"] = {"methods": {"lstm_*": {"train": {"lr": 0.1}}}}
    write_yaml(tmp_path / "pat.yaml", exp)
    with pytest.raises(ConfigError, match=r"per_dataset.other.methods.lstm_\*: the pattern matches none"):
        resolve_experiment(load_experiment(tmp_path / "pat.yaml"), "tiny")
