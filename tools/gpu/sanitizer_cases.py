"""One small call of each CUDA C++ kernel of mmact, for compute-sanitizer.

gpu_check's ``cuda_kernels`` part runs it under ``compute-sanitizer --tool
racecheck``, ``synccheck`` and ``initcheck`` (shared-memory races, barrier
misuse, reads of global memory nothing wrote: what the CPU simulation of the
kernels, ``mmact.testing.cuda_sim``, cannot see). The cases call the
operators of ``csrc/apa_cuda.cu`` and ``csrc/fles_cuda.cu`` directly (no
cuBLAS between them): APA / AGLU forward, backward and rebuilt backward with
per-channel parameters along rows (NCHW) and columns (channels last) and
shared ones (every tile reduction and the parameter-gradient kernel); FleS's
pixel passes on NCHW and channels-last maps, float32 and float16.

Usage: ``compute-sanitizer --tool racecheck python
tools/gpu/sanitizer_cases.py``; exit 1 when the CUDA kernels do not load.
"""
import sys

import torch

from mmact.ops import backends, cuda_build

LAMBDA_MIN = 1e-4


def apa_cases(ops) -> None:
    g = torch.Generator(device='cuda').manual_seed(0)
    x = torch.randn(2, 6, 9, 11, device='cuda', generator=g)
    go = torch.randn(x.shape, device='cuda', generator=g)
    channel = (torch.rand(6, device='cuda', generator=g) + 0.5,
               torch.rand(6, device='cuda', generator=g) + 0.2)
    shared = tuple(p[:1].contiguous() for p in channel)
    for layout in (torch.contiguous_format, torch.channels_last):
        xl = x.contiguous(memory_format=layout)
        gl = go.contiguous(memory_format=layout)
        for kappa, lam in (channel, shared):
            for name in ('apa', 'aglu'):
                getattr(ops, name)(xl, kappa, lam, LAMBDA_MIN, 1)
                getattr(ops, f'{name}_backward')(gl, xl, kappa, lam,
                                                 LAMBDA_MIN, 1, True, True)
        scale = torch.rand(2, 6, 1, 1, device='cuda', generator=g) + 0.5
        shift = torch.randn(1, 6, 1, 1, device='cuda', generator=g)
        ops.aglu_backward_rebuilt(gl, *channel, LAMBDA_MIN, xl, scale, shift,
                                  xl, scale[:1], True, True)


def fles_cases(ops) -> None:
    g = torch.Generator(device='cuda').manual_seed(1)
    for dtype in (torch.float32, torch.float16):
        for layout in (torch.contiguous_format, torch.channels_last):
            x = torch.randn(2, 40, 13, 17, device='cuda', generator=g)
            x = x.to(dtype).contiguous(memory_format=layout)
            go = torch.randn(
                x.shape, device='cuda',
                generator=g).to(dtype).contiguous(memory_format=layout)
            k_ve = torch.rand(2, 40, 3, 5, device='cuda', generator=g) + 0.5
            k_ho = torch.rand(2, 40, 3, 5, device='cuda', generator=g) + 0.5
            ind, div = ops.fles_stats(x, 5, 4, 'positive')
            ops.fles_apply(x, k_ve, k_ho, 5, 4, 'erf')
            gx, _, _ = ops.fles_gate_backward(x, go, k_ve, k_ho, 5, 4, 'erf')
            ops.fles_indicator_backward(gx, x, ind, div, 5, 4, 'positive')
            ops.fles_input_backward(x, go, k_ve, k_ho, ind, div, 5, 4, 'erf',
                                    'positive')


def main() -> int:
    with backends.using(cuda_kernels=True):
        if cuda_build.library() is None:
            print('sanitizer_cases: the CUDA kernels did not load (see the '
                  'log line above)')
            return 1
        apa_cases(torch.ops.mmact)
        fles_cases(torch.ops.mmact)
        torch.cuda.synchronize()
    print('sanitizer_cases: every kernel ran')
    return 0


if __name__ == '__main__':
    sys.exit(main())
