"""What one APA / AGLU call runs on the Triton row besides its kernels,
run by test_triton_kernels.py in Triton's interpreter (as
``triton_cases.py``: ``TRITON_INTERPRET=1 MMACT_TRITON=1``).

A forward + backward is at most three kernel launches and no torch op but
the allocations of its outputs, for the operator, the module and the
memory-lean path ActResNet trains with (the clamp and the chain rule to
the raw parameters run inside the kernels). Half precision stays half:
the bytes saved for backward are the input's (``saved / input <= 1.05``).
"""
import pytest
import torch

from mmact.models.activations import AGLU, APA
from mmact.models.backbones import ActResNet
from mmact.models.backbones.recompute import recompute_act
from mmact.ops import aglu, apa
from mmact.ops.apa import rebuilt_backward

OPS = {'apa': apa, 'aglu': aglu}
MODULES = {'apa': APA, 'aglu': AGLU}
FORWARD = ['eta_fwd_kernel']
BACKWARD = ['eta_bwd_kernel', 'eta_param_grad_kernel']
# ResNet-18 at a quarter of its widths: the interpreter's time grows with
# the programs, the launches and their glue do not change
NARROW = dict(stem_channels=16, base_channels=16)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 2).to(dtype)


def parameters(nk, nl, seed=1):
    g = torch.Generator().manual_seed(seed)
    kappa = (torch.rand(nk, generator=g) + 0.5).requires_grad_()
    # one lambda below the clamp: its gradient is the mask's zero
    lam = (torch.rand(nl, generator=g) + 0.2)
    lam[0] = 1e-5
    return kappa, lam.requires_grad_()


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('nk,nl', [(1, 1), (5, 5), (1, 5), (5, 1)])
def test_operator_runs_its_kernels_only(name, nk, nl, torch_calls):
    x = randn(2, 5, 6, 7).requires_grad_()
    kappa, lam = parameters(nk, nl)
    go = randn(2, 5, 6, 7, seed=2)
    with torch_calls() as forward:
        y = OPS[name](x, kappa, lam)
    with torch_calls(within='FusedFunctionBackward') as backward:
        y.backward(go)
    assert (forward.kernels, forward.ops) == (FORWARD, [])
    assert (backward.kernels, backward.ops) == (BACKWARD, [])
    # the raw parameters' gradients, in their shape, the mask applied
    assert kappa.grad.shape == kappa.shape and lam.grad.shape == lam.shape
    assert lam.grad[0] == 0 and kappa.grad.abs().sum() > 0
    # against the float64 torch row
    xd = x.detach().double().requires_grad_()
    kd = kappa.detach().double().requires_grad_()
    ld = lam.detach().double().requires_grad_()
    OPS[name](xd, kd, ld).backward(go.double())
    for got, want in ((y, OPS[name](xd, kd, ld)), (x.grad, xd.grad),
                      (kappa.grad, kd.grad), (lam.grad, ld.grad)):
        torch.testing.assert_close(
            got.double(), want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('name', ['apa', 'aglu'])
@pytest.mark.parametrize('num_parameters', [1, 5])
def test_module_runs_its_kernels_only(name, num_parameters, torch_calls):
    act = MODULES[name](num_parameters=num_parameters)
    x = randn(3, 5, 9).requires_grad_()
    with torch_calls() as forward:
        y = act(x)
    with torch_calls(within='FusedFunctionBackward') as backward:
        y.backward(torch.ones_like(y))
    assert (forward.kernels, forward.ops) == (FORWARD, [])
    assert (backward.kernels, backward.ops) == (BACKWARD, [])
    act.eval()
    with torch.no_grad(), torch_calls() as inference:
        act(x)
    assert (inference.kernels, inference.ops) == (FORWARD, [])


@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_memory_lean_path_runs_its_kernels_only(name, torch_calls):
    """RecomputeAct with every source (attention weights per sample, a
    residual with its BN scale, a shift): the rebuilt backward kernel."""
    act = MODULES[name](num_parameters=4)
    g = torch.Generator().manual_seed(3)
    src, other = randn(2, 4, 5, 5), randn(2, 4, 5, 5, seed=4)
    scale = torch.rand(2, 4, 1, 1, generator=g) + 0.5
    shift = torch.randn(1, 4, 1, 1, generator=g)
    other_scale = torch.rand(1, 4, 1, 1, generator=g) + 0.5
    z = (src * scale + shift + other * other_scale).requires_grad_()
    with torch_calls(within='RecomputeAct') as forward:
        y = recompute_act(act, z, src, scale, shift, other, other_scale)
    with torch_calls(within='RecomputeActBackward') as backward:
        y.backward(torch.ones_like(y))
    assert (forward.kernels, forward.ops) == (FORWARD, [])
    assert (backward.kernels, backward.ops) == (BACKWARD, [])


def test_act_resnet_memory_lean_step(torch_calls):
    """ActResNet's training step through the memory-lean path: per
    activation (AGLU at every position, the APA gates of APA*) three
    kernels, and no torch op inside the activations' nodes."""
    torch.manual_seed(0)
    model = ActResNet(
        18,
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer'),
        out_indices=(3, ),
        **NARROW).train()
    x = randn(2, 3, 32, 32)
    nodes = ('FusedFunction', 'RecomputeAct', 'FusedFunctionBackward',
             'RecomputeActBackward')
    with torch_calls(within=nodes) as step:
        model(x)[0].square().mean().backward()
    # 1 stem + 8 blocks x 2 AGLUs, 8 APA gates
    calls = 1 + 16 + 8
    assert step.ops == []
    assert step.kernels.count('eta_fwd_kernel') == calls
    assert step.kernels.count('eta_bwd_kernel') == calls
    assert step.kernels.count('eta_param_grad_kernel') == calls
    assert len(step.kernels) == 3 * calls


class SavedBytes:
    """Bytes saved for backward inside the block."""

    def __init__(self) -> None:
        self.bytes = 0

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(
            self.pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def pack(self, t):
        if not isinstance(t, torch.nn.Parameter):  # kept by the model
            self.bytes += t.numel() * t.element_size()
        return t

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)


HALF = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize('dtype', HALF)
@pytest.mark.parametrize('name', ['apa', 'aglu'])
def test_half_saves_half(name, dtype):
    x = randn(4, 8, 16, 16, dtype=dtype).requires_grad_()
    kappa, lam = parameters(8, 8)
    with SavedBytes() as op:
        y = OPS[name](x, kappa, lam)
    act = MODULES[name](num_parameters=8)
    with SavedBytes() as module:
        y = act(x)
    assert y.dtype == dtype
    inputs = x.numel() * x.element_size()
    assert op.bytes / inputs <= 1.05
    assert module.bytes / inputs <= 1.05


@pytest.mark.parametrize('dtype', HALF)
def test_half_saves_half_under_autocast_in_act_resnet(dtype):
    """APA*+AGLU ActResNet under autocast (the memory-lean path): the
    activations' bytes saved for backward are half; its backward hands
    half gradients back."""
    torch.manual_seed(0)
    kw = dict(
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer'),
        out_indices=(3, ),
        **NARROW)
    model = ActResNet(18, **kw).train()
    relu = ActResNet(
        18,
        act_cfg=dict(type='ReLU', inplace=True),
        attention_cfg=dict(type='SEAttention'),
        out_indices=(3, ),
        **NARROW).train()
    x = randn(2, 3, 32, 32)
    saved = {}
    for key, net in (('aglu', model), ('relu', relu)):
        with SavedBytes() as bytes_, torch.autocast('cpu', dtype=dtype):
            y = net(x)[0]
        saved[key] = bytes_.bytes
        assert y.dtype == dtype
        y.float().square().mean().backward()
    # AGLU keeps no more than the in-place ReLU model (the memory-lean path)
    assert saved['aglu'] <= 1.05 * saved['relu'], saved


@pytest.mark.parametrize('dtype', HALF)
def test_rebuilt_backward_keeps_half(dtype):
    """Half sources with float32 coefficients: the gradient is half on the
    kernel and on the torch fallback (a per-sample scale on a map whose
    samples are not outermost)."""
    src = randn(2, 4, 5, 5, dtype=dtype)
    go = randn(2, 4, 5, 5, dtype=dtype, seed=5)
    kappa, lam = parameters(4, 4)
    scale = torch.rand(2, 4, 1, 1) + 0.5
    grad_z = rebuilt_backward('aglu', go, kappa, lam, 1e-4, 1, src, scale)[0]
    assert grad_z.dtype == dtype
    strided = src.transpose(0, 1).contiguous().transpose(0, 1)
    grad_z = rebuilt_backward('aglu', go, kappa, lam, 1e-4, 1, strided,
                              scale)[0]
    assert grad_z.dtype == dtype


def test_parameters_elsewhere_are_refused():
    x = randn(2, 3, 4)
    kappa = torch.ones(3)
    with pytest.raises(ValueError, match='lambda must be a contiguous'):
        aglu(x, kappa, torch.ones(6)[::2])
    with pytest.raises(TypeError, match='kappa must be float32, float16 or '
                       'bfloat16, got torch.float64'):
        aglu(x, kappa.double(), torch.ones(3))
