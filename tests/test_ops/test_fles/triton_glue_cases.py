"""What a FleS call runs on the Triton row besides its kernels and its
scale MLP, run by test_triton_kernels.py in Triton's interpreter (as
``triton_cases.py``): the four pixel passes, no torch op outside the MLP
(the ``fles.mlp`` profiler range) but allocations; a half input is saved
as it is."""
import pytest
import torch

from mmact.models.activations.fles import FleS
from mmact.ops.fles import fles_fused, fles_reference, window_geometry

FORWARD = ['fles_stats_kernel', 'fles_apply_kernel']
BACKWARD = ['fles_gate_sums_kernel', 'fles_grad_kernel']


def randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize('mode', ['positive', 'mean'])
@pytest.mark.parametrize('window', [None, (3, 4)])
def test_op_glue(mode, window, torch_calls):
    x = randn(2, 8, 7, 9).requires_grad_()
    geom = window_geometry(7, 9, window)
    params = [(randn(*s, seed=i) * 0.3).requires_grad_()
              for i, s in enumerate([(2, 4, 8), (2, 4), (2, 8, 4), (2, 8)])]
    with torch_calls(skip=('fles.mlp', )) as forward:
        y = fles_fused(x, geom, params, mode=mode)
    with torch_calls(within='_FleSTritonBackward',
                     skip=('fles.mlp', )) as backward:
        y.backward(torch.ones_like(y))
    assert (forward.kernels, forward.ops) == (FORWARD, [])
    assert (backward.kernels, backward.ops) == (BACKWARD, [])
    # against the float64 composite
    xd = x.detach().double().requires_grad_()
    pd = [p.detach().double().requires_grad_() for p in params]
    want = fles_reference(xd, geom, pd, mode=mode)
    want.backward(torch.ones_like(want))
    for got, ref in zip([y, x.grad] + [p.grad for p in params],
                        [want, xd.grad] + [p.grad for p in pd]):
        torch.testing.assert_close(
            got.double(), ref.detach(), rtol=1e-5, atol=1e-6)


def test_module_glue(torch_calls):
    act = FleS(channels=8, window_size=(4, 5), reduction=4)
    x = randn(2, 8, 8, 10).requires_grad_()
    with torch_calls(skip=('fles.mlp', )) as forward:
        y = act(x)
    with torch_calls(within='_FleSTritonBackward',
                     skip=('fles.mlp', )) as backward:
        y.backward(torch.ones_like(y))
    assert (forward.kernels, forward.ops) == (FORWARD, [])
    assert (backward.kernels, backward.ops) == (BACKWARD, [])


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_module_saves_half(dtype):
    """The module hands a half map to the kernels as it is: the bytes
    saved for backward are the input's (plus the float32 indicator grid),
    and the result matches the float32 layer on the same values."""
    # 2 x 2 windows of 16 x 16: the indicator grid is small against the map
    act = FleS(channels=8, window_size=(16, 16), reduction=4)
    x = randn(1, 8, 32, 32).to(dtype).requires_grad_()
    saved = []

    def pack(t):
        if not isinstance(t, torch.nn.Parameter):
            saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = act(x)
    assert y.dtype == dtype
    assert sum(saved) / (x.numel() * x.element_size()) <= 1.05
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == dtype
    x32 = x.detach().float().requires_grad_()
    want = act(x32)
    want.backward(torch.ones_like(want))
    tol = dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(y.float(), want.detach(), **tol)
    torch.testing.assert_close(x.grad.float(), x32.grad, **tol)
