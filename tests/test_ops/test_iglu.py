"""Tests of mmact.ops.iglu / iglu_approx."""
import math

import pytest
import torch

from mmact.ops import iglu, iglu_approx
from mmact.compat import TORCHSCRIPT_ONNX_EXPORT


def test_iglu_formula_and_limits():
    x = torch.linspace(-6, 6, 121, dtype=torch.float64)
    want = x * (0.5 + torch.atan(2.0 * x) / math.pi)
    torch.testing.assert_close(iglu(x, 2.0), want)
    # large sigma ~ ReLU, small sigma ~ x / 2
    torch.testing.assert_close(iglu(x, 1e6), torch.relu(x), atol=1e-5, rtol=0)
    torch.testing.assert_close(iglu(x, 1e-9), x / 2, atol=1e-7, rtol=0)


def test_iglu_approx_formula_and_closeness():
    x = torch.linspace(-6, 6, 121, dtype=torch.float64)
    s = 1.5
    want = 0.5 * x * (1 + 2 * torch.relu(s * x)) / (1 + (s * x).abs())
    torch.testing.assert_close(iglu_approx(x, s), want)
    # the gates differ by less than 0.025 (Kang et al., IGLU, Fig. 3)
    gate = iglu(x, s) / x
    gate_approx = iglu_approx(x, s) / x
    mask = x != 0
    assert (gate - gate_approx)[mask].abs().max() < 0.025
    torch.testing.assert_close(
        iglu_approx(x, 1e7), torch.relu(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize('fn', [iglu, iglu_approx])
def test_gradcheck_with_learnable_sigma(fn):
    x = torch.randn(4, 5, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()
    sigma = torch.tensor([0.8], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x, sigma))


@pytest.mark.parametrize('fn', [iglu, iglu_approx])
def test_dtypes_and_errors(fn):
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.tensor([-1e4, -1.0, 0.0, 1.0, 1e4], dtype=dtype)
        y = fn(x, torch.tensor([1.0]))
        assert y.dtype == dtype and torch.isfinite(y).all()
    with pytest.raises(TypeError, match='floating-point'):
        fn(torch.arange(4))
    with pytest.raises(ValueError, match='sigma must hold a single value'):
        fn(torch.randn(3), torch.ones(3))


@pytest.mark.parametrize('fn', [iglu, iglu_approx])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_saves_only_the_input_and_half_backward(fn, dtype):
    x = (torch.randn(8, 64) * 100).to(dtype).requires_grad_()
    sigma = torch.tensor([2.0], requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t) or t, lambda t: t):
        y = fn(x, sigma)
    big = [t for t in saved if t.numel() > 1]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()
    y.sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad).all()
    s64 = sigma.detach().double().requires_grad_()
    fn(x.detach().double(), s64).sum().backward()
    torch.testing.assert_close(
        sigma.grad.double(), s64.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('fn', [iglu, iglu_approx])
def test_compile_and_onnx(fn, tmp_path):
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    sigma = torch.tensor([1.3], requires_grad=True)
    compiled = torch.compile(fn, backend='aot_eager', fullgraph=True)
    got = torch.autograd.grad(compiled(x, sigma).sum(), (x, sigma))
    want = torch.autograd.grad(fn(x, sigma).sum(), (x, sigma))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)

    ort = pytest.importorskip('onnxruntime')

    class Net(torch.nn.Module):

        def forward(self, x):
            return fn(x, 0.7)

    path = str(tmp_path / 'iglu.onnx')
    torch.onnx.export(
        Net(), (x.detach() * 10, ),
        path,
        input_names=['x'],
        **TORCHSCRIPT_ONNX_EXPORT)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    out = sess.run(None, {'x': (x.detach() * 10).numpy()})[0]
    torch.testing.assert_close(
        torch.from_numpy(out), Net()(x.detach() * 10), rtol=1e-5, atol=1e-5)
