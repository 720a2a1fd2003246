"""docs/methods.md is exactly `xcbench list -v`: the parameter reference never drifts from the code."""

import subprocess
import sys

from conftest import REPO


def test_methods_reference_is_in_sync_with_the_registries():
    r = subprocess.run([sys.executable, "-m", "xcbench", "list", "-v"], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert (REPO / "docs" / "methods.md").read_text() == r.stdout, \
        "docs/methods.md is stale: regenerate it with `python -m xcbench list -v > docs/methods.md`"


def test_every_cli_verb_and_option_has_help():
    from xcbench.cli import parser
    p = parser()
    sub = next(a for a in p._actions if a.dest == "verb")
    for name, sp in sub.choices.items():
        assert sp.description or sub._choices_actions and any(c.dest == name and c.help for c in sub._choices_actions), name
        for a in sp._actions:
            if a.dest != "help":
                assert a.help, f"xcbench {name} {a.option_strings}: no help text"
