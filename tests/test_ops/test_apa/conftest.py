"""What the CUDA kernels' tests of APA / AGLU share (test_cuda.py on a GPU,
test_cuda_sim.py through the CPU simulation)."""
import pytest
import torch

from mmact.ops.apa.formula import aglu_reference, apa_reference

#: The clamp of lambda in the cases.
LAMBDA_MIN = 1e-4
#: What test_cuda.py allows the float32 kernels on the ``layouts`` cases, as
#: relative L2 errors against float64 of (output, grad_x): the simulated
#: error of the GPU's formulas (the host's exp2f) plus what exp2f's
#: documented 2 ulp (and the host's 0.5) carry to the values, rounded up by
#: at most a quarter (test_cuda_tolerance_sim.py holds it to both).
FLOAT32_TOL = (5e-7, 1.6e-6)


#: What the parameter gradients may differ from float64 by, relative to the
#: sum of their terms' magnitudes (a float32 sum of n terms in any order).
PARAM_GRAD_TOL = 1e-6
_REFERENCE = {'apa': apa_reference, 'aglu': aglu_reference}


def _param_grad_scales(name, x, kappa, lam, dim, go):
    """The sums of the parameter gradients' terms' magnitudes (float64),
    per parameter: what a float32 sum's error is relative to (a gradient
    whose terms cancel is ill-conditioned; its relative error is not the
    kernel's: the shared-parameter 'long rows' case is 3e-5 off in the C
    kernels too)."""
    shapes = []
    for p in (kappa, lam):
        shapes.append([1] * x.dim())
        if p.numel() > 1:
            shapes[-1][dim] = -1
    leaves = [
        p.double().view(shape).expand(x.shape).clone().requires_grad_()
        for p, shape in zip((kappa, lam.clamp_min(LAMBDA_MIN)), shapes)
    ]
    y = _REFERENCE[name](x.double(), *leaves)
    terms = torch.autograd.grad(y, leaves, go.double())
    return [
        t.abs().sum([d for d in range(x.dim())
                     if shape[d] == 1]).reshape(p.shape)
        for t, p, shape in zip(terms, (kappa, lam), shapes)
    ]


def _param_grads_close(name, x, kappa, lam, dim, go, got, want, factor=1):
    """Whether the parameter gradients ``got`` are ``want``'s within
    ``factor`` x :data:`PARAM_GRAD_TOL` of their terms' scale."""
    scales = _param_grad_scales(name, x, kappa, lam, dim, go)
    return all(((a.double() - b.double()).abs() <=
                factor * PARAM_GRAD_TOL * scale).all()
               for a, b, scale in zip(got, want, scales))


@pytest.fixture
def param_grads_close():
    """``param_grads_close(name, x, kappa, lam, dim, go, got, want,
    factor=1)``: the parameter gradients ``got`` and ``want`` agree within
    ``factor`` x :data:`PARAM_GRAD_TOL` of the sum of their terms'
    magnitudes."""
    return _param_grads_close


def _layouts(device):

    def randn(*shape):
        g = torch.Generator().manual_seed(0)
        return (torch.randn(*shape, generator=g) * 3.0).to(device)

    return [
        ('nchw odd sizes', randn(3, 5, 7, 9), 1, 5),
        ('nchw 4x4 maps', randn(4, 32, 4, 4), 1, 32),
        ('channels_last',
         randn(2, 6, 5,
               7).contiguous(memory_format=torch.channels_last), 1, 6),
        ('nlc', randn(2, 37, 24), -1, 24),
        ('nc', randn(33, 300), 1, 300),
        ('transposed', randn(4, 6, 10).transpose(1, 2), 2, 6),
        ('sliced', randn(2, 6, 9, 9)[:, :, ::2], 1, 6),
        ('long rows', randn(2, 3, 70, 70), 1, 3),
        # 256 partial sums per channel: every thread of the parameter
        # gradients' reduction holds one
        ('many samples', randn(256, 2, 4, 4), 1, 2),
        ('fewer values than threads', randn(2, 3, 4, 5), 1, 3),
    ]


@pytest.fixture
def float32_tol():
    """:data:`FLOAT32_TOL`."""
    return FLOAT32_TOL


@pytest.fixture
def layouts():
    """``layouts(device)``: (what, x, channel_dim, channels) of every
    layout the CUDA and Triton rows take (dense in any order of dims, or
    not), of one block and of many, of fewer values than a block's threads
    and of as many partial sums per channel as threads."""
    return _layouts


def _rebuilt_case(layout, scale, other, nk, nl, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = 3, 6, 7, 9

    def maps():
        t = torch.randn(n, c, h, w, generator=g)
        if layout == 'channels_last':
            t = t.contiguous(memory_format=torch.channels_last)
        elif layout == 'samples inside':  # not outermost in memory
            t = torch.randn(c, n, h, w, generator=g).transpose(0, 1)
        return t.to(device, dtype)

    def coef(rows=1):
        return (torch.rand(rows, c, 1, 1, generator=g) + 0.5).to(device)

    src, go = maps(), maps()
    scale = dict(none=None, channel=coef(), sample=coef(n))[scale]
    shift = torch.randn(1, c, 1, 1, generator=g).to(device)
    sources = (src, scale, shift, maps(),
               coef()) if other else (src, scale, shift, None, None)
    kappa = (torch.rand(nk, generator=g) + 0.5).to(device)
    lam = torch.rand(nl, generator=g) + 0.2
    lam[:2] = torch.tensor([LAMBDA_MIN, LAMBDA_MIN / 2])[:nl]
    return sources, kappa, lam.to(device), go


@pytest.fixture
def rebuilt_case():
    """``rebuilt_case(layout, scale, other, nk, nl, dtype, device)``: the
    sources of ``z = src * scale + shift + other * other_scale`` ((3, 6, 7,
    9) maps in ``layout``: 'nchw', 'channels_last' or 'samples inside';
    ``scale`` 'none', 'channel' or 'sample'; ``other`` with its scale or
    none), ``nk`` kappas and ``nl`` lambdas (the first two at and below the
    clamp :data:`LAMBDA_MIN`) and an output gradient."""
    return _rebuilt_case
