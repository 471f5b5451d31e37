"""FleS scale-MLP layouts, window grids and token grids."""
import pytest
import torch

import mmact  # noqa: F401
from mmact.models.activations import FleS
from mmact.ops.fles import grid_window


def _randomize(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return m


def _count(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize('channels', [64, 96, 320, 768])
@pytest.mark.parametrize('reduction', [16, 24, 32, 48])
def test_parameter_count_of_each_layout(channels, reduction):
    h = channels // reduction
    # shared trunk: C -> h once, two heads h -> C (about 3 C^2 / r)
    shared = FleS(channels=channels, reduction=reduction)
    assert _count(shared) == 3 * channels * h + h + 2 * channels
    separate = FleS(
        channels=channels, reduction=reduction, mlp_layout='separate')
    assert _count(separate) == 4 * channels * h + 2 * h + 2 * channels


def test_shared_trunk_equals_two_mlps_with_tied_first_layers():
    torch.manual_seed(0)
    sep = _randomize(
        FleS(
            channels=16,
            reduction=4,
            window_size=(2, 3),
            mlp_layout='separate'))
    with torch.no_grad():
        sep.fc1_weight[1] = sep.fc1_weight[0]
        sep.fc1_bias[1] = sep.fc1_bias[0]
    shared = FleS(channels=16, reduction=4, window_size=(2, 3))
    shared.load_state_dict(
        dict(
            fc1_weight=sep.fc1_weight[0],
            fc1_bias=sep.fc1_bias[0],
            fc2_weight=sep.fc2_weight,
            fc2_bias=sep.fc2_bias))
    x = torch.randn(2, 16, 5, 7)
    torch.testing.assert_close(shared(x), sep(x))
    for a, b in zip(shared.scales(x), sep.scales(x)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('layout', ['shared', 'separate'])
def test_both_layouts_start_at_softplus_0_6(layout):
    m = FleS(channels=64, reduction=8, mlp_layout=layout)
    k_ve, k_ho, _ = m.scales(torch.randn(2, 64, 6, 6) * 4)
    k0 = torch.nn.functional.softplus(torch.tensor(0.6))
    torch.testing.assert_close(k_ve, torch.full_like(k_ve, k0.item()))
    torch.testing.assert_close(k_ho, torch.full_like(k_ho, k0.item()))


def test_checkpoint_of_the_separate_layout():
    # keys and shapes written by mmact before the shared trunk existed
    c, h = 32, 4
    old = dict(
        fc1_weight=torch.randn(2, h, c),
        fc1_bias=torch.randn(2, h),
        fc2_weight=torch.randn(2, c, h),
        fc2_bias=torch.randn(2, c))
    lazy = FleS(reduction=8, mlp_layout='separate')
    lazy.load_state_dict(old, strict=True)
    assert lazy.channels == c
    for key, value in old.items():
        assert torch.equal(lazy.state_dict()[key], value)
    lazy(torch.randn(1, c, 4, 4))
    for shared in (FleS(reduction=8), FleS(channels=c, reduction=8)):
        with pytest.raises(
                ValueError,
                match="'separate' scale-MLP layout.*"
                "mlp_layout='separate'"):
            shared.load_state_dict(old)
    with pytest.raises(ValueError, match="holds the 'shared'"):
        FleS(
            reduction=8, mlp_layout='separate').load_state_dict(
                FleS(channels=c, reduction=8).state_dict())


def test_grid_window():
    assert grid_window(800 // 4, 1333 // 4, (9, 15)) == (23, 23)
    assert grid_window(25, 42, (9, 15)) == (3, 3)
    assert grid_window(5, 4, (9, 15)) == (1, 1)
    assert grid_window(10, 16, 3) == (4, 6)
    with pytest.raises(TypeError, match='window_grid must be an int or'):
        grid_window(4, 4, (1, 2, 3))


def test_window_grid_is_a_pixel_window_per_map():
    torch.manual_seed(1)
    grid = _randomize(FleS(channels=8, reduction=4, window_grid=(3, 5)))
    for (h, w), window in (((10, 16), (4, 4)), ((5, 5), (2, 1)), ((2, 3),
                                                                  (1, 1))):
        pix = FleS(channels=8, reduction=4, window_size=window)
        pix.load_state_dict(grid.state_dict())
        x = torch.randn(2, 8, h, w)
        torch.testing.assert_close(grid(x), pix(x))
    assert 'window_grid=(3, 5)' in repr(grid)


@pytest.mark.parametrize('kwargs', [
    dict(window_size=(2, 3)),
    dict(window_size=(2, 2), stride=1),
    dict(window_grid=(2, 2)),
    dict(),
])
def test_tokens_with_a_grid_shape_equal_the_feature_map(kwargs):
    torch.manual_seed(2)
    ref = _randomize(FleS(channels=8, reduction=4, **kwargs))
    x = torch.randn(2, 8, 5, 6, requires_grad=True)
    want = ref(x)
    tok = FleS(channels=8, reduction=4, **kwargs)
    tok.load_state_dict(ref.state_dict())
    tokens = x.flatten(2).transpose(1, 2)  # (B, H*W, C), row-major
    got = tok(tokens, hw_shape=(5, 6))
    torch.testing.assert_close(got, want.flatten(2).transpose(1, 2))
    # the same through the attribute a backbone sets, and for (B, C, L)
    tok.token_hw_shape = (5, 6)
    torch.testing.assert_close(tok(tokens), got)
    seq = FleS(channels=8, reduction=4, data_format='channels_first', **kwargs)
    seq.load_state_dict(ref.state_dict())
    torch.testing.assert_close(
        seq(x.flatten(2), hw_shape=(5, 6)), want.flatten(2))
    # scales are reported on the token grid
    k_ve = tok.scales(tokens)[0]
    assert k_ve.shape == (2, 8, 5, 6)
    torch.testing.assert_close(k_ve, ref.scales(x)[0])
    # gradients reach the tokens
    g1 = torch.autograd.grad(got.square().sum(), x)[0]
    g2 = torch.autograd.grad(want.square().sum(), x)[0]
    torch.testing.assert_close(g1, g2)
