import pytest

from xcbench import registry
from xcbench.registry import HEADS, Registry, UnknownNameError

FAMILIES = ["HEADS", "SAMPLERS", "SELECTORS", "OPTIMIZERS", "ENCODERS", "FEATURES", "READERS", "GENERATORS",
            "TASKS", "RENDERERS"]


@pytest.mark.parametrize("family", FAMILIES)
def test_unknown_name_lists_known_ones(family):
    reg = getattr(registry, family)
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


def test_builtin_heads_registered():
    assert {"full_softmax", "sq_hinge", "bce"} <= set(HEADS.names())
