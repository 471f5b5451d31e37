"""Tests of mmact.ops.apa / aglu: values, gradients, memory, dtypes, export."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmact.ops import aglu, aglu_reference, apa, apa_reference
from mmact.compat import TORCHSCRIPT_ONNX_EXPORT

OPS = {'apa': (apa, apa_reference), 'aglu': (aglu, aglu_reference)}


def _bview(p, x, dim=1):
    if p.numel() == 1:
        return p.reshape(())
    shape = [1] * x.dim()
    shape[dim] = -1
    return p.reshape(shape)


# ---------------------------------------------------------------- values
@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('channels', [1, 5])
def test_matches_paper_formula(name, channels):
    op, ref = OPS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 4, 4, generator=g, dtype=torch.float64) * 3
    k = torch.rand(channels, generator=g, dtype=torch.float64) * 2 - 0.5
    lam = torch.rand(channels, generator=g, dtype=torch.float64) * 2 + 0.05
    out = op(x, k, lam)
    expected = ref(x, _bview(k, x), _bview(lam, x))
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_channel_last_layout():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 6, generator=g, dtype=torch.float64)
    k = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    lam = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    out = aglu(x, k, lam, channel_dim=-1)
    torch.testing.assert_close(out, aglu_reference(x, k, lam))


def test_special_case_silu_and_sigmoid():
    x = torch.linspace(-30, 30, 2001)
    one = torch.ones(1)
    torch.testing.assert_close(aglu(x, one, one), F.silu(x))
    torch.testing.assert_close(apa(x, one, one), torch.sigmoid(x))


def test_special_case_sigmoid_gelu():
    x = torch.linspace(-10, 10, 1001)
    out = aglu(x, torch.tensor(1.702), torch.tensor(1.0))
    torch.testing.assert_close(out, x * torch.sigmoid(1.702 * x))


def test_lambda_to_zero_is_gumbel_gate():
    x = torch.linspace(-2, 8, 501, dtype=torch.float64)
    k = torch.tensor(1.3, dtype=torch.float64)
    out = apa(x, k, torch.tensor(1e-9, dtype=torch.float64), lambda_min=1e-9)
    gumbel = torch.exp(-torch.exp(-k * x))
    torch.testing.assert_close(out, gumbel, rtol=0, atol=1e-7)
    # the default clamp (1e-4) stays close to the limit
    near = apa(x.float(), k.float(), torch.tensor(0.0))
    torch.testing.assert_close(near, gumbel.float(), rtol=0, atol=1e-3)


def test_large_kappa_is_relu_and_large_lambda_is_identity():
    x = torch.linspace(-5, 5, 1001)
    relu_like = aglu(x, torch.tensor(200.0), torch.tensor(1.0))
    torch.testing.assert_close(relu_like, F.relu(x), rtol=0, atol=5e-3)
    ident = aglu(x, torch.tensor(1.0), torch.tensor(1e6))
    torch.testing.assert_close(ident, x, rtol=0, atol=1e-3)


def test_lambda_is_clamped_and_python_floats_accepted():
    x = torch.randn(4, 3)
    below = aglu(x, 1.1, -5.0)  # clamped to lambda_min
    at_min = aglu(x, 1.1, 1e-4)
    assert torch.equal(below, at_min)
    lam = torch.tensor([-1.0], requires_grad=True)
    aglu(x, torch.tensor([1.0]), lam).sum().backward()
    assert lam.grad.item() == 0.0  # clamp passes no gradient below min


# ------------------------------------------------------------- gradients
@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('channels', [1, 3])
def test_gradcheck(name, channels):
    op = OPS[name][0]
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64) *
         2).requires_grad_()
    k = (torch.rand(channels, generator=g, dtype=torch.float64) * 2 -
         0.5).requires_grad_()
    lam = (torch.rand(channels, generator=g, dtype=torch.float64) + 0.1)
    lam.requires_grad_()
    assert torch.autograd.gradcheck(op, (x, k, lam), eps=1e-6, atol=1e-7)
    # each input alone (the others frozen) takes the needs_input_grad paths
    for i in range(3):
        args = [
            t.detach().requires_grad_(j == i)
            for j, t in enumerate((x, k, lam))
        ]
        assert torch.autograd.gradcheck(op, tuple(args), eps=1e-6, atol=1e-7)


def test_lambda_gradient_has_log1p_term():
    """The paper's Eq. 8 drops log1p(t)/l^2; ours matches autograd."""
    x = torch.tensor([-1.0, -0.5], dtype=torch.float64)
    k = torch.tensor(1.2, dtype=torch.float64)
    lam = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    aglu(x, k, lam).sum().backward()
    lam_ref = lam.detach().clone().requires_grad_()
    aglu_reference(x, k, lam_ref).sum().backward()
    torch.testing.assert_close(lam.grad, lam_ref.grad)
    # the published formula -z/l * eta / (l + e^{kz}) misses exactly the
    # z * eta * log1p(t) / l^2 term, which is not small
    lam0 = lam.detach()
    eta = apa_reference(x, k, lam0)
    paper = -x / lam0 * eta / (lam0 + torch.exp(k * x))
    missing = x * eta * torch.log1p(lam0 * torch.exp(-k * x)) / lam0**2
    torch.testing.assert_close(lam.grad, (paper + missing).sum())
    assert paper.sum().sign() != lam.grad.sign()  # wrong sign here


def test_parameter_gradients_are_reduced_per_channel():
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    k = torch.tensor([0.9, 1.1, 1.3], dtype=torch.float64, requires_grad=True)
    lam = torch.tensor([0.2, 0.5, 0.9],
                       dtype=torch.float64,
                       requires_grad=True)
    aglu(x, k, lam).pow(2).sum().backward()
    k2 = k.detach().view(1, 3, 1, 1).requires_grad_()
    l2 = lam.detach().view(1, 3, 1, 1).requires_grad_()
    aglu_reference(x, k2, l2).pow(2).sum().backward()
    assert k.grad.shape == (3, ) and lam.grad.shape == (3, )
    torch.testing.assert_close(k.grad, k2.grad.view(3))
    torch.testing.assert_close(lam.grad, l2.grad.view(3))


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('k_channels, l_channels', [(1, 3), (3, 1)])
def test_shared_beside_per_channel_parameter(name, k_channels, l_channels):
    """One shared and one per-channel parameter: float64 gradcheck, and the
    float32 fused CPU path (>= 4096 elements) against the float64 result."""
    op, reference = OPS[name]
    g = torch.Generator().manual_seed(5)
    k = torch.rand(k_channels, generator=g, dtype=torch.float64) + 0.5
    lam = torch.rand(l_channels, generator=g, dtype=torch.float64) + 0.2
    x = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        op, (x.requires_grad_(), k.clone().requires_grad_(),
             lam.clone().requires_grad_()),
        eps=1e-6,
        atol=1e-7)
    x = torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64)
    grads = {}
    for dtype in (torch.float32, torch.float64):
        args = [t.to(dtype, copy=True).requires_grad_() for t in (x, k, lam)]
        op(*args).pow(2).sum().backward()
        grads[dtype] = [a.grad.double() for a in args]
    ref_args = [
        x.clone().requires_grad_(),
        k.view(-1, 1, 1).clone().requires_grad_(),
        lam.view(-1, 1, 1).clone().requires_grad_()
    ]
    reference(*ref_args).pow(2).sum().backward()
    for got, want, ref in zip(grads[torch.float32], grads[torch.float64],
                              ref_args):
        torch.testing.assert_close(want, ref.grad.reshape(want.shape))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- memory
@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_saves_only_the_input(name, dtype):
    op = OPS[name][0]
    x = torch.randn(2, 8, 16, 16, dtype=dtype, requires_grad=True)
    k = torch.rand(8, requires_grad=True)
    lam = torch.rand(8, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = op(x, k, lam)
    big = [t for t in saved if t.numel() > 8]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()
    total = sum(t.numel() * t.element_size() for t in big)
    assert total == x.numel() * x.element_size()
    y.sum().backward()
    assert x.grad is not None and k.grad is not None and lam.grad is not None


def test_reference_composite_saves_more():
    """Guards the meaning of the test above: plain autograd saves more."""
    x = torch.randn(2, 8, 16, 16, requires_grad=True)
    k = torch.rand((), requires_grad=True)
    lam = torch.rand((), requires_grad=True) + 0.1
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t) or t, lambda t: t):
        aglu_reference(x, k, lam)
    big = sum(t.numel() * t.element_size() for t in saved if t.numel() > 8)
    assert big >= 3 * x.numel() * x.element_size()


# ------------------------------------------------------- dtypes, extremes
EXTREMES = torch.tensor(
    [-1e4, -300., -30., -1., -1e-3, 0., 1e-3, 1., 30., 300., 1e4])


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('dtype',
                         [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('k_val,l_val', [(1.3, 1e-4), (-1.0, 1e-4), (1.0, 1.0),
                                         (8.0, 50.0), (0.0, 0.5)])
def test_extremes_are_finite(name, dtype, k_val, l_val):
    op = OPS[name][0]
    x = EXTREMES.to(dtype).detach().clone().requires_grad_()
    k = torch.tensor([k_val], requires_grad=True)
    lam = torch.tensor([l_val], requires_grad=True)
    y = op(x, k, lam)
    assert y.dtype == dtype
    y.sum().backward()
    for t in (y, x.grad, k.grad, lam.grad):
        assert torch.isfinite(t).all(), (t, name, dtype, k_val, l_val)
    # values agree with a float64 evaluation of the stable form
    x64 = EXTREMES.double()
    lam64 = torch.tensor(max(l_val, 1e-4), dtype=torch.float64)
    eta = torch.exp(-F.softplus(torch.log(lam64) - k_val * x64) / lam64)
    want = (x64 * eta if name == 'aglu' else eta).to(dtype)
    torch.testing.assert_close(y.detach(), want)


def test_autocast_extremes(cpu_autocast_dtype):
    dtype = cpu_autocast_dtype
    lin = torch.nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(4) * 1e4)
        lin.bias.zero_()
    x = torch.tensor([[1.0, -1.0, 0.5, -0.5]])
    k = torch.tensor([1.2], requires_grad=True)
    lam = torch.tensor([1e-4], requires_grad=True)
    with torch.autocast('cpu', dtype=dtype):
        h = lin(x)
        y = aglu(h, k, lam)
    assert h.dtype == dtype and y.dtype == dtype
    y.float().sum().backward()
    assert torch.isfinite(y).all()
    assert torch.isfinite(k.grad).all() and torch.isfinite(lam.grad).all()
    assert torch.isfinite(lin.weight.grad).all()


def test_half_input_is_computed_in_float32():
    x = torch.randn(64, dtype=torch.float64) * 4
    k = torch.tensor(1.1)
    lam = torch.tensor(0.3)
    y16 = aglu(x.to(torch.bfloat16), k, lam)
    want = aglu(x.to(torch.bfloat16).float(), k, lam).to(torch.bfloat16)
    assert torch.equal(y16, want)


# --------------------------------------------------------- bad arguments
def test_errors():
    x = torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match='floating-point'):
        aglu(torch.ones(3, dtype=torch.long), 1.0, 1.0)
    with pytest.raises(ValueError, match='lambda_min must be > 0'):
        apa(x, 1.0, 1.0, lambda_min=0.0)
    with pytest.raises(ValueError, match=r'4 values.*3 channels'):
        aglu(x, torch.ones(4), torch.ones(4))
    with pytest.raises(ValueError, match='channel_dim=5'):
        aglu(x, torch.ones(3), torch.ones(3), channel_dim=5)
    with pytest.raises(TypeError, match='channel_dim must be an int axis'):
        aglu(x, torch.ones(3), torch.ones(3), channel_dim=1.5)
    with pytest.raises(TypeError, match='channel_dim must be an int axis'):
        aglu(x, torch.ones(3), torch.ones(3), channel_dim=True)
    # numpy ints and float-convertible lambda_min take the same path
    import numpy as np
    torch.testing.assert_close(
        aglu(x, torch.ones(3), torch.ones(3), np.float32(1e-3), np.int64(1)),
        aglu(x, torch.ones(3), torch.ones(3), 1e-3, 1))


# ------------------------------------------------------- compile / ONNX
def test_torch_compile_matches_eager():
    pytest.importorskip('torch._dynamo')
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    k = torch.tensor([1.1, 0.9, 1.2], requires_grad=True)
    lam = torch.tensor([0.3, 0.6, 0.9], requires_grad=True)

    def f(x, k, lam):
        return aglu(x, k, lam) + apa(x, k, lam)

    compiled = torch.compile(f, backend='aot_eager', fullgraph=True)
    out = compiled(x, k, lam)
    grads = torch.autograd.grad(out.sum(), (x, k, lam))
    out_e = f(x, k, lam)
    grads_e = torch.autograd.grad(out_e.sum(), (x, k, lam))
    torch.testing.assert_close(out, out_e)
    for a, b in zip(grads, grads_e):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_torch_compile_inductor():
    """Inductor generates C++ on CPU (needs a compiler; ~20 s)."""
    import shutil
    if shutil.which('cc') is None and shutil.which('g++') is None:
        pytest.skip('inductor needs a C/C++ compiler on CPU')
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    k = torch.tensor([1.1, 0.9, 1.2], requires_grad=True)
    lam = torch.tensor([0.3, 0.6, 0.9], requires_grad=True)
    compiled = torch.compile(aglu, fullgraph=True)
    got = torch.autograd.grad(compiled(x, k, lam).sum(), (x, k, lam))
    want = torch.autograd.grad(aglu(x, k, lam).sum(), (x, k, lam))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_onnx_round_trip(tmp_path):
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnx')

    class Net(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.k = torch.nn.Parameter(torch.tensor([1.1, 0.8, 1.3]))
            self.lam = torch.nn.Parameter(torch.tensor([0.2, 0.5, 1e-5]))

        def forward(self, x):
            return aglu(x, self.k, self.lam) + apa(x, 1.2, 0.4)

    net = Net().eval()
    x = torch.randn(2, 3, 5, 5) * 5
    path = str(tmp_path / 'aglu.onnx')
    torch.onnx.export(
        net, (x, ),
        path,
        opset_version=17,
        input_names=['x'],
        output_names=['y'],
        **TORCHSCRIPT_ONNX_EXPORT)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    got = sess.run(None, {'x': x.numpy()})[0]
    with torch.no_grad():
        want = net(x).numpy()
    assert math.isclose(float(abs(got - want).max()), 0.0, abs_tol=1e-4)
