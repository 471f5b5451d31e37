"""The pattern every operator follows (mmact.ops.table): the composite row
serves tracing, ONNX export and forward-mode AD; the fused row refuses a
second derivative with one message; ``composite=True`` gives gradient
penalties their double backward."""
import pytest
import torch

from mmact.compat import TORCHSCRIPT_ONNX_EXPORT
from mmact.ops import acon_c, aglu, apa, arelu, backends, iglu, iglu_approx
from mmact.ops import smu
from mmact.ops.table import implementation


def _case(name):
    """``(fn, x, params)``: the operator on float64 leaves."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    x = x + 0.1 * x.sign()  # away from AReLU's kink

    def scalar(v):
        return torch.tensor([v], dtype=torch.float64)

    params = {
        'arelu': (arelu, [scalar(0.4), scalar(1.5)]),
        'iglu': (iglu, [scalar(1.3)]),
        'iglu_approx': (iglu_approx, [scalar(0.7)]),
        'smu': (smu, [scalar(2.0)]),
        'acon_c': (acon_c, [
            torch.rand(3, generator=g, dtype=torch.float64) + 0.5,
            torch.rand(3, generator=g, dtype=torch.float64) * 0.2,
            torch.rand(2, 3, generator=g, dtype=torch.float64) + 0.5
        ]),
        'apa': (apa, [scalar(0.8), scalar(0.6)]),
        'aglu': (aglu, [scalar(1.2), scalar(0.4)]),
    }[name]
    return params[0], x, params[1]


NAMES = ['arelu', 'iglu', 'iglu_approx', 'smu', 'acon_c', 'apa', 'aglu']
ELEMENTWISE = NAMES[:5]


def test_the_table():
    assert implementation() == 'torch'
    with backends.using(composite=True):
        assert implementation() == 'composite'
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        assert implementation() == 'composite'


@pytest.mark.parametrize('name', NAMES)
def test_second_derivative_refused_then_given_by_the_composite(name):
    fn, x, params = _case(name)
    leaves = [t.clone().requires_grad_() for t in [x, *params]]
    (gx, ) = torch.autograd.grad(
        fn(*leaves).pow(2).sum(), leaves[0], create_graph=True)
    with pytest.raises(
            RuntimeError,
            match=f'mmact.ops.{name} cannot be differentiated twice'):
        gx.sum().backward()
    with backends.using(composite=True):
        assert torch.autograd.gradgradcheck(fn, leaves)
        (gx, ) = torch.autograd.grad(
            fn(*leaves).pow(2).sum(), leaves[0], create_graph=True)
        penalty = torch.autograd.grad(gx.pow(2).sum(), leaves[1:])
    assert all(p.abs().sum() > 0 for p in penalty)


@pytest.mark.parametrize('name', ELEMENTWISE)
def test_fused_row_matches_the_composite(name):
    fn, x, params = _case(name)
    leaves = [t.clone().requires_grad_() for t in [x, *params]]
    assert torch.autograd.gradcheck(fn, leaves)
    y = fn(*leaves)
    assert y.grad_fn.name() == 'FusedFunctionBackward'
    go = torch.randn_like(y)
    got = torch.autograd.grad(y, leaves, go)
    with backends.using(composite=True):
        y_c = fn(*leaves)
        want = torch.autograd.grad(y_c, leaves, go)
    torch.testing.assert_close(y, y_c, rtol=1e-12, atol=1e-14)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('name', ELEMENTWISE)
def test_onnx_export_matches_onnxruntime(name, tmp_path):
    ort = pytest.importorskip('onnxruntime')
    fn, x, params = _case(name)
    params = [p.float() for p in params]

    class Net(torch.nn.Module):

        def forward(self, x):
            return fn(x, *params)

    path = str(tmp_path / f'{name}.onnx')
    x = x.float()
    torch.onnx.export(
        Net(), (x, ), path, input_names=['x'], **TORCHSCRIPT_ONNX_EXPORT)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    out = sess.run(None, {'x': x.numpy()})[0]
    torch.testing.assert_close(
        torch.from_numpy(out), Net()(x), rtol=1e-5, atol=1e-6)
