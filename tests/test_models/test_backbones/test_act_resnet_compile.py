"""torch.compile of an APA*+AGLU ActResNet equals eager, on every supported
torch (CI runs this on torch 2.1.2 and 2.14.1)."""
import copy
import shutil

import pytest
import torch

import mmact  # noqa: F401
from mmact.models.backbones import ActResNet

APA_STAR_AGLU = dict(
    act_cfg=dict(type='AGLU', kappa_init=(0.9, 1.1), lambda_init=(0.8, 1.2)),
    # no dropout: eager and compiled draw different random masks
    attention_cfg=dict(type='APASELayer', dropout=0.0))


def _model(recompute_act: bool) -> ActResNet:
    """ResNet-18's first stage at stride 2: every block kind (downsampling
    with a projection shortcut, then plain) at a quarter of the compile time
    of four stages."""
    torch.manual_seed(0)
    return ActResNet(
        18,
        num_stages=1,
        strides=(2, ),
        dilations=(1, ),
        out_indices=(0, ),
        recompute_act=recompute_act,
        zero_init_residual=False,
        **APA_STAR_AGLU).train()


def _step(model, x):
    outs = model(x)
    loss = sum((o.square().mean() for o in outs), x.new_zeros(()))
    params = [p for p in model.parameters() if p.requires_grad]
    return outs, torch.autograd.grad(loss, params)


@pytest.mark.parametrize(
    'backend,recompute_act',
    [
        # Traced, the blocks leave the memory-lean backward to the compiler:
        # the compiled model is the same either way, and eager runs the
        # memory-lean default. Inductor takes about 30 s.
        ('aot_eager', True),
        pytest.param(
            'inductor',
            True,
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(
                    shutil.which('g++') is None
                    and shutil.which('c++') is None,
                    reason='inductor needs a C++ compiler on the CPU')
            ])
    ])
def test_compiled_equals_eager(backend, recompute_act):
    eager = _model(recompute_act)
    compiled_model = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(compiled_model, backend=backend)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    want_outs, want_grads = _step(eager, x)
    got_outs, got_grads = _step(compiled, x)
    for got, want in zip(got_outs, want_outs):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert len(got_grads) == len(want_grads) >= 40
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
    # the running statistics moved alike
    torch.testing.assert_close(compiled_model.bn1.running_mean,
                               eager.bn1.running_mean)


def test_resnet50_compiles_as_one_graph():
    """ActResNet-50 APA*+AGLU (memory-lean backward, the default) compiles
    with ``fullgraph=True``: no graph break anywhere, so none inside an
    activation; dynamo's graph (``backend='eager'``) equals eager. In
    float64, where both run the same torch math (through 50 layers and BN
    on a 2 x 2 map the C kernels' float32 rounding would be amplified).
    Traced, the blocks leave the memory-lean backward to the compiler."""
    torch.manual_seed(0)
    eager = ActResNet(
        50, out_indices=(3, ), zero_init_residual=False,
        **APA_STAR_AGLU).train().double()
    compiled_model = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(compiled_model, backend='eager', fullgraph=True)
    # two samples: with one, BN's batch mean makes the pooled attention
    # input equal BN's (zero) bias, and gradients are rounding noise
    x = torch.randn(
        2, 3, 64, 64, generator=torch.Generator().manual_seed(2)).double()
    want_outs, want_grads = _step(eager, x)
    got_outs, got_grads = _step(compiled, x)
    torch.testing.assert_close(got_outs[0], want_outs[0])
    assert len(got_grads) == len(want_grads) > 200
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want)
