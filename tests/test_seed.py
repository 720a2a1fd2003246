"""Random draws that do not depend on the device (seed.py): every generator is a CPU one, draws are
made on it and moved, and dropout draws its mask on the CPU. On the CPU nothing changes: the helpers
and features.base.Dropout give the bits of the torch calls they replace, so kept results reproduce.
tests/test_cuda.py checks the other half (CUDA gets the CPU's draws) on a GPU machine."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from xcbench.features.base import Dropout
from xcbench.seed import multinomial, rand, randint, torch_generator

SRC = Path(__file__).resolve().parents[1] / "src" / "xcbench"


def test_helpers_draw_what_the_torch_calls_draw():
    g1, g2 = torch_generator(0, "t"), torch_generator(0, "t")
    assert g1.device.type == "cpu"
    assert torch.equal(rand((3, 4), g1, "cpu"), torch.rand((3, 4), generator=g2))
    assert torch.equal(randint(9, (5,), g1, "cpu"), torch.randint(0, 9, (5,), generator=g2))
    p = torch.rand(4, 7, generator=torch.Generator().manual_seed(1))
    assert torch.equal(multinomial(p, 6, g1), torch.multinomial(p, 6, replacement=True, generator=g2))
    assert torch.equal(multinomial(p, 3, g1, replacement=False), torch.multinomial(p, 3, generator=g2))


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout_gives_nn_dropouts_bits_and_gradients_and_uses_the_same_stream(p, strided):
    x = torch.randn(4, 35, 20, generator=torch.Generator().manual_seed(0))
    if strided:  # a batch-first LSTM's output: a (B, T, H) view of (T, B, H) memory
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    outs = {}
    for name, layer in (("ours", Dropout(p)), ("torch", nn.Dropout(p))):
        xx = x.clone().requires_grad_(True)
        torch.manual_seed(3)
        a = layer(xx)
        b = layer(a * 2)  # a second draw: both must leave the global stream at the same place
        b.sum().backward()
        outs[name] = (a.detach(), b.detach(), xx.grad, torch.rand(2))
    for u, v in zip(outs["ours"], outs["torch"]):
        assert torch.equal(u, v)
    layer = Dropout(p).eval()
    assert layer(x) is x


def test_dropout_rejects_a_probability_outside_0_1():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Dropout(1.5)


def test_the_package_makes_no_generator_on_a_device_and_draws_no_generator_on_one():
    """The rule of seed.py, read from the source: torch.Generator() without a device outside seed.py
    (whose `torch_generator` alone makes one on a device, for `train.draws: device`), and a draw with a
    generator either on the generator's device (then moved) or through the seed.py helpers.
    Data preparation (data/) runs on the CPU only and is left out."""
    bad = []
    for f in sorted(set(SRC.rglob("*.py")) - set((SRC / "data").rglob("*.py"))):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if ("torch.Generator(device=" in line and f.name != "seed.py") or "nn.Dropout(" in line:
                bad.append(f"{f.name}:{i}: {line.strip()}")
            if re.search(r"generator=(\w+), device=(?!\1\.device\b)", line) or \
                    ("torch.multinomial(" in line and f.name != "seed.py"):
                bad.append(f"{f.name}:{i}: {line.strip()}")
    assert not bad, "draws tied to a device (use xcbench.seed's rand/randint/multinomial):\n" + "\n".join(bad)


def test_an_lstm_language_model_draws_nn_dropouts_masks():
    """The LSTM LM's dropout on its (strided) batch-first output gives the bits nn.Dropout gives there, so runs
    trained before Dropout replaced nn.Dropout reproduce (a contiguous mask did not: 0.22 apart after one pass)."""
    from xcbench.features.lstm import LSTMLM

    x, outs = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1)), []
    for swap in (False, True):
        m = LSTMLM(50, torch.Generator().manual_seed(0), emb=8, hidden=6, layers=2, dropout=0.5).train()
        if swap:
            m.drop = nn.Dropout(0.5)
        torch.manual_seed(3)
        h, _ = m(x)
        h.sum().backward()
        outs.append((h.detach(), m.tokens.weight.grad))
    assert all(torch.equal(a, b) for a, b in zip(*outs))
