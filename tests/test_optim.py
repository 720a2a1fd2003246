"""The registered Adam is torch's Adam in its multi-tensor form: the same parameters, bit for bit, as the
per-tensor loop torch picks on the CPU, so switching to it changed no kept run's numbers."""

import pytest
import torch

from xcbench.registry import OPTIMIZERS
from xcbench.seed import torch_generator

SHAPES = [(300, 16), (16, 16), (16,), (300,)]  # a class table, an encoder layer, biases


def _trained(opt_of, steps: int = 5, **kw) -> list[torch.Tensor]:
    g = torch_generator(0, "params")
    ps = [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in SHAPES]
    opt = opt_of(ps, lr=1e-2, **kw)
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * 1e-2
        opt.step()
    return [p.detach() for p in ps]


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 1e-2}, {"amsgrad": True}, {"betas": (0.8, 0.99), "eps": 1e-6}])
def test_registered_adam_equals_torchs_loop_bit_for_bit(kw):
    ours = OPTIMIZERS.get("adam")
    loop = lambda ps, **a: torch.optim.Adam(ps, foreach=False, **a)  # noqa: E731
    for a, b in zip(_trained(ours, **kw), _trained(loop, **kw)):
        assert torch.equal(a, b)


def test_registered_adam_is_the_multi_tensor_form_unless_told():
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert OPTIMIZERS.get("adam")(p, lr=0.1).defaults["foreach"] is True
    assert OPTIMIZERS.get("adam")(p, lr=0.1, foreach=False).defaults["foreach"] is False
    fused = OPTIMIZERS.get("adam")(p, lr=0.1, fused=True)  # the faster kernel that rounds differently, when asked
    assert fused.defaults["fused"] is True and not fused.defaults["foreach"]
