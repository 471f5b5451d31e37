"""How FleS's CUDA kernels round, through their CPU simulation
(:mod:`mmact.testing.cuda_sim`): window sums in double as the C kernels
sum a band's window (a 200x304 global window: 1,900 values per pixel lane
in NCHW, 7,600 channels-last), and a half map's grad_x rounded once
(``fles_input_backward``: both terms in float32, one rounding, where the
gate pass's half grad_x with the indicator's term added is rounded
twice)."""
import pytest
import torch

HALF = [torch.float16, torch.bfloat16]
LAYOUTS = [torch.contiguous_format, torch.channels_last]


def planes(t):
    """t as the C kernels take it: (planes, H, W) float32, contiguous."""
    return t.float().reshape(-1, *t.shape[-2:]).contiguous()


def global_window_case(layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 8, 200, 304, generator=g) * 2
    go = torch.randn(1, 8, 200, 304, generator=g)
    k_ve = torch.rand(1, 8, 1, 1, generator=g) + 0.5
    k_ho = torch.rand(1, 8, 1, 1, generator=g) + 0.5
    return (x.contiguous(memory_format=layout),
            go.contiguous(memory_format=layout), k_ve, k_ho)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('mode', ['positive', 'mean'])
def test_global_window_indicator_as_the_c_kernels(sim, layout, mode):
    """The same float32 values summed in double on both sides: the
    indicators within one float32 ulp (float32 lanes would be 1.2 ulps off
    in NCHW, 4.2 channels-last), the divisors equal."""
    x, _, _, _ = global_window_case(layout)
    ind, div = sim.fles_stats(x, 200, 304, mode)
    ind_c, div_c = torch.ops.mmact.fles_stats(planes(x), 200, 304, mode)
    assert torch.equal(div, div_c.view_as(div))
    ind_c = ind_c.view_as(ind)
    assert ((ind - ind_c).abs()
            <= ind_c.abs() * 2.0**-23).all(), ((ind - ind_c).abs().max(),
                                               ind_c)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('gate', ['sigmoid', 'tanh_softplus'])
def test_global_window_scale_gradients_as_the_c_kernels(sim, layout, gate):
    """The window sums of the scales' gradients against the C kernels'
    (double band sums) within 3e-9 of the sums of their terms' magnitudes:
    the terms differ by each side's exp (the polynomial, exp2f), about
    1e-7 each, which cancel to 4e-10 to 8e-10 here; float32 lanes would
    add 7e-9 (NCHW, 1,900 values a lane) to 2.5e-8 (channels-last,
    7,600)."""
    x, go, k_ve, k_ho = global_window_case(layout, seed=1)
    _, g_ve, g_ho = sim.fles_gate_backward(x, go, k_ve, k_ho, 200, 304, gate)
    _, ve_c, ho_c = torch.ops.mmact.fles_gate_backward(
        planes(x), planes(go), k_ve.flatten(), k_ho.flatten(), 200, 304, gate)
    gx = (go.double() * x.double()).abs()
    scale_ve = gx.sum((-2, -1), keepdim=True)
    scale_ho = (gx * x.double().abs()).sum(
        (-2, -1), keepdim=True) * k_ve.double()
    assert ((g_ve - ve_c.view_as(g_ve)).abs() <= 3e-9 * scale_ve).all()
    assert ((g_ho - ho_c.view_as(g_ho)).abs() <= 3e-9 * scale_ho).all()


@pytest.mark.parametrize('dtype', HALF)
@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('window', [(5, 4), (13, 17)])
def test_half_grad_x_is_rounded_once(sim, dtype, layout, window):
    """The input pass on a half map is the same pass on the float32 map of
    its values, rounded once; the gate pass's half grad_x with the
    indicator's term added (rounded twice) is not, and is further from
    float64."""
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(2, 40, 13, 17, generator=g) * 2).to(dtype)
    go = torch.randn(2, 40, 13, 17, generator=g).to(dtype)
    x, go = (t.contiguous(memory_format=layout) for t in (x, go))
    _, div = sim.fles_stats(x, *window, 'positive')
    k_ve, k_ho = torch.rand_like(div) + 0.5, torch.rand_like(div) + 0.5
    g_ind = torch.randn_like(div) * 10
    args = (k_ve, k_ho, g_ind, div, *window, 'erf', 'positive')
    once = sim.fles_input_backward(x, go, *args)
    single = sim.fles_input_backward(x.float(), go.float(), *args)
    assert once.dtype == dtype and once.stride() == x.stride()
    assert torch.equal(once, single.to(dtype))
    # the float32 passes as the node runs them on a float32 map
    gx32, _, _ = sim.fles_gate_backward(x.float(), go.float(), k_ve, k_ho,
                                        *window, 'erf')
    sim.fles_indicator_backward(gx32, x.float(), g_ind, div, *window,
                                'positive')
    torch.testing.assert_close(single, gx32, rtol=2**-22, atol=1e-30)
    twice, _, _ = sim.fles_gate_backward(x, go, k_ve, k_ho, *window, 'erf')
    sim.fles_indicator_backward(twice, x, g_ind, div, *window, 'positive')
    assert not torch.equal(twice, once)
    exact = gx32.double()
    assert ((once.double() - exact).norm() < (twice.double() - exact).norm())
