"""What FleS's CUDA row decides without a GPU: the reasons the CUDA kernels
decline a call (:func:`mmact.ops.fles.cpu.cuda_declines`, device-free
checks held on CPU tensors), the one warning naming them, and CPU calls
keeping their rows with ``MMACT_CUDA_KERNELS=1`` (nothing built, nothing
logged). The GPU cases are test_fles/test_cuda.py."""
import warnings

import pytest
import torch

from mmact.ops import backends
from mmact.ops.fles import fles_shared_mlp_scales, window_geometry
from mmact.ops.fles import cpu
from mmact.ops.fles.dispatch import implementation


def _case(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=g).to(dtype)
    params = [
        torch.randn(2, 4, generator=g),
        torch.randn(2, generator=g),
        torch.randn(2, 4, 2, generator=g),
        torch.randn(2, 4, generator=g)
    ]
    return x, params


def test_declined_calls_name_their_reason():
    x, params = _case()
    tiles = window_geometry(8, 8, (3, 3))
    assert cpu.cuda_declines(x, tiles, 'sigmoid', 'positive', True,
                             params) is None
    # a window larger than the map arrives clamped: taken
    clamped = window_geometry(8, 8, (9, 15))
    assert clamped.clamped and cpu.cuda_declines(
        x, clamped, 'erf', 'mean', True, params) is None
    assert cpu.cuda_declines(
        x.contiguous(memory_format=torch.channels_last), tiles,
        'tanh_softplus', 'positive', True, params) is None
    for half in (torch.float16, torch.bfloat16):
        assert cpu.cuda_declines(x.to(half), tiles, 'tanh_gate', 'positive',
                                 True, params) is None
    declined = {
        'overlapping windows':
        (x, window_geometry(8, 8, (4, 4), (2, 2)), 'sigmoid', 'positive',
         True, params),
        "gate 'relu'": (x, tiles, 'relu', 'positive', True, params),
        "indicator 'softplus'": (x, tiles, 'sigmoid', 'softplus', True,
                                 params),
        'a scale function other than the MLP layouts':
        (x, tiles, 'sigmoid', 'positive', False, params),
        'a torch.float64 map': (x.double(), tiles, 'sigmoid', 'positive',
                                True, params),
        'neither NCHW nor channels-last': (x.transpose(2, 3), tiles,
                                           'sigmoid', 'positive', True,
                                           params),
        'MLP parameters torch.float64 on cpu':
        (x, tiles, 'sigmoid', 'positive', True,
         [p.double() for p in params]),
    }
    for reason, args in declined.items():
        assert reason in cpu.cuda_declines(*args), reason


def test_the_warning_names_the_reason_and_the_row():
    with pytest.warns(UserWarning, match=r"FleS's CUDA kernels "
                      r'\(MMACT_CUDA_KERNELS=1\) do not take overlapping '
                      r'windows \(stride < window\); the triton row runs'):
        cpu.warn_declined('overlapping windows (stride < window)', 'triton')


def test_cpu_calls_keep_their_rows():
    """MMACT_CUDA_KERNELS=1 changes nothing for CPU maps: no build, no
    warning, the operator row as before."""
    x, params = _case()
    tiles = window_geometry(8, 8, (3, 3))
    want = implementation(x, tiles, 'sigmoid', 'positive',
                          fles_shared_mlp_scales, params).name
    with backends.using(cuda_kernels=True), warnings.catch_warnings():
        warnings.simplefilter('error')
        got = implementation(x, tiles, 'sigmoid', 'positive',
                             fles_shared_mlp_scales, params).name
        assert cpu.cuda_route() is None  # no CUDA map asked
    assert got == want
