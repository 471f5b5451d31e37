"""Half precision stays half on the CPU rows: the bytes every activation
saves for backward are its input's (saved / input <= 1.05) in float16 and
bfloat16, for the operators, the modules and ActResNet's memory-lean path
(the Triton rows: tests/test_ops/test_*/triton_glue_cases.py)."""
import pytest
import torch
import torch.nn as nn

from mmact.models.activations import AGLU, APA, FleS
from mmact.models.backbones import ActResNet
from mmact.ops import aglu, apa

HALF = [torch.float16, torch.bfloat16]


class Saved:
    """Bytes saved for backward in the block (parameters, which the model
    keeps anyway, aside)."""

    def __init__(self) -> None:
        self.bytes = 0

    def __enter__(self) -> 'Saved':
        self.hooks = torch.autograd.graph.saved_tensors_hooks(
            self.pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def pack(self, t):
        if not isinstance(t, nn.Parameter):
            self.bytes += t.numel() * t.element_size()
        return t

    def __exit__(self, *exc) -> None:
        self.hooks.__exit__(*exc)


def ratio(fn, x):
    with Saved() as saved:
        y = fn(x)
    assert y.dtype == x.dtype
    y.float().sum().backward()
    assert x.grad.dtype == x.dtype
    return saved.bytes / (x.numel() * x.element_size())


@pytest.mark.parametrize('dtype', HALF)
def test_operators_and_modules(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 16, 16, generator=g).to(dtype)
    kappa, lam = torch.ones(32), torch.full((32, ), 0.5)
    for fn in (lambda t: apa(t, kappa, lam), lambda t: aglu(t, kappa, lam),
               APA(32), AGLU(32),
               FleS(channels=32, window_size=(16, 16), reduction=8)):
        assert ratio(fn, x.clone().requires_grad_()) <= 1.05


@pytest.mark.parametrize('dtype', HALF)
def test_fles_torch_row_keeps_the_float32_result(dtype):
    """A half map on the torch row is computed in float32 (a transient
    copy), as the layer computed it before it handed the map on as half."""
    act = FleS(channels=32, window_size=(3, 5), reduction=8)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 32, 9, 10, generator=g).to(dtype).requires_grad_()
    y = act(x)
    y.float().square().sum().backward()
    x32 = x.detach().float().requires_grad_()
    want = act(x32)
    want.square().sum().backward()
    torch.testing.assert_close(y, want.to(dtype))
    torch.testing.assert_close(x.grad, x32.grad.to(dtype))


def test_memory_lean_path_under_autocast(cpu_autocast_dtype):
    """The APA*+AGLU ActResNet saves no more than the SE-ReLU one under
    autocast (the memory-lean path keeps what the convolutions keep)."""
    dtype = cpu_autocast_dtype
    saved = {}
    torch.manual_seed(0)
    for key, act, attn in (('aglu', dict(type='AGLU'), 'APASELayer'),
                           ('relu', dict(type='ReLU', inplace=True),
                            'SEAttention')):
        model = ActResNet(
            18, act_cfg=act, attention_cfg=dict(type=attn),
            out_indices=(3, )).train()
        x = torch.randn(2, 3, 32, 32)
        with Saved() as bytes_, torch.autocast('cpu', dtype=dtype):
            y = model(x)[0]
        assert y.dtype == dtype
        y.float().sum().backward()
        saved[key] = bytes_.bytes
    assert saved['aglu'] <= 1.05 * saved['relu'], saved
