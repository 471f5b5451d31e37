"""Tests of mmact.ops.arelu."""
import pytest
import torch

from mmact.ops import arelu
from mmact.compat import TORCHSCRIPT_ONNX_EXPORT


def test_values_against_formula():
    x = torch.linspace(-4, 4, 81, dtype=torch.float64)
    out = arelu(x, 0.9, 2.0)
    expected = torch.where(
        x < 0, 0.9 * x,
        (1 + torch.sigmoid(torch.tensor(2.0, dtype=torch.float64))) * x)
    torch.testing.assert_close(out, expected)


def test_input_gradient_at_and_around_zero():
    x = torch.tensor([-1.0, -0.0, 0.0, 2.0], requires_grad=True)
    arelu(x, 0.25, 0.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.25, 1.5, 1.5, 1.5]))


def test_alpha_is_clamped():
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(arelu(x, 5.0, 0.0), torch.tensor([-1.98, 4.5]))
    torch.testing.assert_close(arelu(x, -1.0, 0.0), torch.tensor([-0.02, 4.5]))


def test_gradcheck_and_clamp_gradient():
    x = torch.randn(3, 4, dtype=torch.float64)
    x = (x + 0.1 * x.sign()).requires_grad_()  # keep away from the kink
    alpha = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    beta = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(arelu, (x, alpha, beta))
    a = torch.tensor([2.0], requires_grad=True)
    arelu(torch.randn(5), a, torch.tensor([1.0])).sum().backward()
    assert a.grad.item() == 0.0  # no gradient through the clamp


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_inputs(dtype):
    x64 = torch.randn(4096, dtype=torch.float64) * 10
    x = x64.to(dtype).requires_grad_()
    alpha = torch.tensor([0.3], requires_grad=True)
    beta = torch.tensor([0.5], requires_grad=True)
    y = arelu(x, alpha, beta)
    assert y.dtype == dtype
    y.sum().backward()
    a64 = alpha.detach().double().requires_grad_()
    b64 = beta.detach().double().requires_grad_()
    arelu(x.detach().double(), a64, b64).sum().backward()
    torch.testing.assert_close(
        alpha.grad.double(), a64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        beta.grad.double(), b64.grad, rtol=1e-5, atol=1e-5)


def test_saves_only_the_input():
    x = torch.randn(4, 64, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t) or t, lambda t: t):
        arelu(x, torch.tensor([0.9], requires_grad=True),
              torch.tensor([2.0], requires_grad=True))
    big = [t for t in saved if t.numel() > 1]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()


def test_errors():
    with pytest.raises(TypeError, match='floating-point'):
        arelu(torch.arange(3))
    with pytest.raises(ValueError, match='alpha must hold a single value'):
        arelu(torch.randn(3), torch.ones(2))


def test_compile_and_onnx(tmp_path):
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    alpha = torch.tensor([0.5], requires_grad=True)
    beta = torch.tensor([1.0], requires_grad=True)
    compiled = torch.compile(arelu, backend='aot_eager', fullgraph=True)
    got = torch.autograd.grad(compiled(x, alpha, beta).sum(), (x, alpha, beta))
    want = torch.autograd.grad(arelu(x, alpha, beta).sum(), (x, alpha, beta))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)

    ort = pytest.importorskip('onnxruntime')

    class Net(torch.nn.Module):

        def forward(self, x):
            return arelu(x, torch.tensor([0.3]), torch.tensor([1.5]))

    path = str(tmp_path / 'arelu.onnx')
    torch.onnx.export(
        Net(), (x.detach(), ),
        path,
        input_names=['x'],
        **TORCHSCRIPT_ONNX_EXPORT)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    out = sess.run(None, {'x': x.detach().numpy()})[0]
    torch.testing.assert_close(
        torch.from_numpy(out), Net()(x.detach()), rtol=1e-5, atol=1e-6)
