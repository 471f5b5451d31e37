"""Where test_cuda.py's float32 tolerance comes from (``FLOAT32_TOL`` of
this folder's conftest), checked through the CPU simulation of the CUDA
kernels (:mod:`mmact.testing.cuda_sim`): on every case of ``layouts`` the
simulated error of the GPU's formulas against float64 (the host's exp2f)
plus what the GPU's exp2f carries to the values stays within it, and the
tolerance is at most a quarter above the largest such sum.

The GPU's exp2f is documented within 2 ulp, the host's (glibc) within 0.5:
each of the kernels' exp2f results may differ by u = 2.5 * 2^-23 relative
from the simulation's. With a = ln(l) - k z, e = exp(-|a|) (one exp2f)
and s = e / (1 + e), eta = exp(-softplus(a) / l) is one more exp2f, and
d ln(eta) / d ln(e) = -s / l; g = sigmoid(a) has |d ln(g) / d ln(e)| =
1 - s for a < 0, else s. Per value, to first order:

* output (eta, z eta): u |y| (1 + s / l);
* APA grad_x = w g k / l (w = grad_out eta, its own exp2f):
  u |gx| (1 + s / l + |d ln g / d ln e|);
* AGLU grad_x = w (1 + k z g / l): u (|gx| (1 + s / l)
  + |w k z g / l| |d ln g / d ln e|).
"""
import torch

from mmact.ops import aglu, apa

OPS = {'apa': apa, 'aglu': aglu}
LAMBDA_MIN = 1e-4
# exp2f's documented error on the GPU and the host's, per call
EXP2F_ULPS = 2.0 + 0.5
U = EXP2F_ULPS * 2.0**-23


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def params(channels, params_of, seed=1):
    """test_cuda.py's parameters: one lambda below the clamp."""
    g = torch.Generator().manual_seed(seed)
    k = torch.empty(channels).uniform_(0.5, 1.5, generator=g)
    lam = torch.empty(channels).uniform_(0.2, 1.5, generator=g)
    if params_of == 'shared':
        k, lam = k[:1], lam[:1]
    elif params_of == 'mixed':
        k = k[:1]
    lam[0] = LAMBDA_MIN / 2
    return k, lam


def along(p, x, dim):
    """A parameter shaped to broadcast against x (per channel along dim)."""
    shape = [1] * x.dim()
    if p.numel() > 1:
        shape[dim] = -1
    return p.double().view(shape)


def reference(name, x, kappa, lam, dim, go):
    """float64 output and grad_x, and the relative L2 errors exp2f carries
    to them (the module's docstring)."""
    z = x.double().requires_grad_()
    k = along(kappa, x, dim)
    lam = along(lam.clamp_min(LAMBDA_MIN), x, dim)
    y = OPS[name](z, kappa.double(), lam.flatten(), LAMBDA_MIN, dim)
    gx, = torch.autograd.grad(y, z, go.double())
    y, z = y.detach(), z.detach()
    a = torch.log(lam) - k * z
    e = torch.exp(-a.abs())
    s = e / (1 + e)
    dg = torch.where(a < 0, 1 - s, s)
    dy = U * y.abs() * (1 + s / lam)
    if name == 'apa':
        dgx = U * gx.abs() * (1 + s / lam + dg)
    else:
        w = go.double() * torch.exp(-torch.nn.functional.softplus(a) / lam)
        dgx = U * (
            gx.abs() * (1 + s / lam) +
            (w * k * z * torch.sigmoid(a) / lam).abs() * dg)
    return (y, gx), (dy.norm() / y.norm()).item(), (dgx.norm() /
                                                    gx.norm()).item()


def test_float32_tolerance_covers_simulation_and_exp2f(sim, layouts,
                                                       float32_tol):
    worst = [0.0, 0.0]
    for name in OPS:
        for params_of in ('channel', 'shared', 'mixed'):
            for what, x, dim, channels in layouts('cpu'):
                k, lam = params(channels, params_of)
                g = torch.Generator().manual_seed(5)
                go = torch.randn(*x.shape, generator=g) * 3.0
                y = getattr(sim, name)(x, k, lam, LAMBDA_MIN, dim)
                gx = getattr(sim,
                             f'{name}_backward')(go, x, k, lam, LAMBDA_MIN,
                                                 dim, False, False)[0]
                want, *carried = reference(name, x, k, lam, dim, go)
                for i, got in enumerate((y, gx)):
                    total = rel(got, want[i]) + carried[i]
                    assert total <= float32_tol[i], (name, params_of, what, i,
                                                     total)
                    worst[i] = max(worst[i], total)
    for tol, total in zip(float32_tol, worst):
        assert tol <= 1.25 * total, (tol, total)
