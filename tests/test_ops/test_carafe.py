"""mmact.ops.carafe: CARAFE's sum against a loop over its definition."""
import pytest
import torch

from mmact.ops.carafe import (carafe, carafe_torch, has_kernel,
                              mmcv_cuda_carafe)


def carafe_loops(features, masks, k, g, s):
    """Wang et al. 2019, Eq. 3-4, one output element at a time."""
    n, c, h, w = features.shape
    r = (k - 1) // 2
    out = features.new_zeros(n, c, h * s, w * s)
    for y in range(h * s):
        for x in range(w * s):
            for ch in range(c):
                group = ch // (c // g)
                for i in range(k):
                    for j in range(k):
                        yy, xx = y // s + i - r, x // s + j - r
                        if 0 <= yy < h and 0 <= xx < w:
                            weight = masks[:, group * k * k + i * k + j, y, x]
                            out[:, ch, y, x] += weight * features[:, ch, yy,
                                                                  xx]
    return out


@pytest.mark.parametrize('c,h,w,k,g,s', [(4, 3, 5, 3, 2, 2), (2, 4, 3, 5, 1, 3),
                                         (3, 2, 2, 1, 3, 2),
                                         (2, 3, 3, 5, 2, 1)])
def test_matches_the_definition_in_float64(c, h, w, k, g, s):
    torch.manual_seed(0)
    features = torch.randn(2, c, h, w, dtype=torch.float64)
    masks = torch.randn(2, g * k * k, h * s, w * s, dtype=torch.float64)
    torch.testing.assert_close(
        carafe(features, masks, k, g, s),
        carafe_loops(features, masks, k, g, s),
        rtol=0,
        atol=1e-13)


def test_gradients_by_gradcheck():
    torch.manual_seed(0)
    features = torch.randn(
        1, 4, 3, 4, dtype=torch.float64, requires_grad=True)
    masks = torch.randn(1, 2 * 9, 6, 8, dtype=torch.float64,
                        requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda f, m: carafe_torch(f, m, 3, 2, 2), (features, masks))


def test_float32_and_bfloat16_follow_float64():
    torch.manual_seed(0)
    features = torch.randn(2, 8, 7, 7, dtype=torch.float64)
    masks = torch.randn(2, 25, 14, 14, dtype=torch.float64).softmax(1)
    exact = carafe(features, masks, 5, 1, 2)
    torch.testing.assert_close(
        carafe(features.float(), masks.float(), 5, 1, 2),
        exact.float(),
        rtol=1e-5,
        atol=1e-6)
    torch.testing.assert_close(
        carafe(features.bfloat16(), masks.bfloat16(), 5, 1, 2).float(),
        exact.float(),
        rtol=0.05,
        atol=0.05)


@pytest.mark.parametrize('args,match', [
    ((4, 1, 2), 'kernel_size must be a positive odd number, got 4'),
    ((3, 3, 2), r'group_size \(3\) must divide the feature channels \(4\)'),
    ((3, 1, 0), 'scale_factor must be >= 1, got 0'),
    ((3, 2, 2), r'masks of shape \(1, 9, 6, 6\).* need \(1, 18, 6, 6\)'),
])
def test_bad_sizes_are_named(args, match):
    features, masks = torch.zeros(1, 4, 3, 3), torch.zeros(1, 9, 6, 6)
    with pytest.raises(ValueError, match=match):
        carafe(features, masks, *args)


def test_kernel_probe_runs_mmcv_and_reads_its_refusal():
    from mmcv.ops.carafe import carafe as mmcv_carafe

    # mmcv 2.1.0 has no CPU CARAFE: the same refusal as a CUDA-less build.
    assert not has_kernel(mmcv_carafe, 'cpu')
    assert has_kernel(lambda *args: args[0], 'cpu')

    def broken(*args):
        raise RuntimeError('CUDA error: an illegal memory access')

    with pytest.raises(RuntimeError, match='illegal memory access'):
        has_kernel(broken, 'cpu')


@pytest.mark.skipif(
    not torch.cuda.is_available() or mmcv_cuda_carafe() is None,
    reason='needs a GPU and mmcv built with CUDA ops')
def test_cuda_equals_mmcv_kernel_and_the_torch_path():
    torch.manual_seed(0)
    features = torch.randn(3, 64, 14, 14, device='cuda', requires_grad=True)
    masks = torch.randn(
        3, 25, 28, 28, device='cuda').softmax(1).requires_grad_()
    out = carafe(features, masks, 5, 1, 2)
    reference = carafe_torch(features, masks, 5, 1, 2)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (features, masks), grad)
    want = torch.autograd.grad(reference, (features, masks), grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
