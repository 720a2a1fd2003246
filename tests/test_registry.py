import pytest

from xcbench import registry
from xcbench.registry import FAMILIES, Registry, UnknownNameError


@pytest.mark.parametrize("family", [f for f, reg in FAMILIES.items() if reg.names()])  # empty ones list nothing
def test_unknown_name_lists_known_ones(family):
    reg = FAMILIES[family]
    with pytest.raises(UnknownNameError) as e:
        reg.get("no-such-method")
    msg = str(e.value)
    assert "no-such-method" in msg
    for name in reg.names():
        assert name in msg


def test_register_and_build():
    reg = Registry("thing")

    @reg.register("a")
    class A:
        def __init__(self, x):
            self.x = x

    assert reg.build("a", x=3).x == 3
    assert A.registry_name == "a"
    with pytest.raises(ValueError):
        reg.register("a")(type("B", (), {}))


def test_list_shows_every_registry_of_the_package():
    """`xcbench list` prints every Registry defined in xcbench.registry (none left out, e.g. DUALS)."""
    import subprocess
    import sys

    regs = {id(v) for v in vars(registry).values() if isinstance(v, Registry)}
    assert regs == {id(r) for r in FAMILIES.values()}
    out = subprocess.run([sys.executable, "-m", "xcbench", "list"], capture_output=True, text=True, check=True).stdout
    for fam, reg in FAMILIES.items():
        line = next(l for l in out.splitlines() if l.split()[0] == fam)
        assert all(n in line for n in reg.names())
