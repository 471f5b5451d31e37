"""Time and memory of mmact activations against native ones (DESIGN §6).

For every operator: forward (with autograd recording), backward, and the
bytes saved for backward (``torch.autograd.graph.saved_tensors_hooks``),
with ratios to native SiLU measured in the same run. Operators are timed in
interleaved rounds so that load from other processes hits all of them alike;
the reported time is the minimum (default) or median over rounds.

Example::

    python tools/analysis/benchmark_activations.py --shape 16 64 56 56 \
        --device cpu --repeats 20 --threads 1
"""
import argparse
import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

from mmact.ops import (aglu, aglu_reference, apa, arelu, iglu, iglu_approx)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        default=[16, 64, 56, 56],
        help='input shape, channels at dim 1')
    parser.add_argument(
        '--device',
        default='cpu',
        help="'cpu', 'cuda' or 'all' (cpu, and cuda if any)")
    parser.add_argument(
        '--dtype',
        default='float32',
        choices=['float32', 'float16', 'bfloat16'])
    parser.add_argument(
        '--repeats', type=int, default=20, help='timed rounds per operator')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument(
        '--threads',
        type=int,
        default=None,
        help='torch CPU threads (default: torch default)')
    parser.add_argument(
        '--timer',
        default='wall',
        choices=['wall', 'cpu'],
        help='wall clock, or process CPU time (robust on '
        'a shared machine; sums all threads)')
    parser.add_argument('--stat', default='min', choices=['min', 'median'])
    return parser.parse_args()


def build_ops(channels: int, device: str) -> Dict[str, Callable]:
    """name -> f(x) using learnable parameters where the op has them."""

    def param(*values):
        return torch.tensor(values, device=device, requires_grad=True)

    k1, l1 = param(1.15), param(0.5)
    kc = torch.empty(channels, device=device).uniform_(1.0, 1.3)
    lc = torch.empty(channels, device=device).uniform_(0.0, 1.0)
    kc.requires_grad_()
    lc.requires_grad_()
    ka, la = param(-0.5), param(0.5)
    alpha, beta, sigma = param(0.9), param(2.0), param(1.0)
    return {
        'ReLU':
        F.relu,
        'SiLU':
        F.silu,
        'GELU':
        F.gelu,
        'AGLU reference (paper formula)':
        lambda x: aglu_reference(x, k1.reshape(()), l1.reshape(())),
        'mmact AGLU':
        lambda x: aglu(x, k1, l1),
        'mmact AGLU per-channel':
        lambda x: aglu(x, kc, lc),
        'mmact APA':
        lambda x: apa(x, ka, la),
        'mmact AReLU':
        lambda x: arelu(x, alpha, beta),
        'mmact IGLU (learnable sigma)':
        lambda x: iglu(x, sigma),
        'mmact IGLUApprox (learnable sigma)':
        lambda x: iglu_approx(x, sigma),
    }


class Timer:

    def __init__(self, device: str, kind: str):
        self.cuda = device.startswith('cuda')
        self.clock = time.process_time if kind == 'cpu' else time.perf_counter

    def __call__(self, fn: Callable) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
        t0 = self.clock()
        fn()
        return (self.clock() - t0) * 1e3


def saved_bytes(fn: Callable, x: torch.Tensor) -> int:
    """Bytes of distinct tensors saved for backward, parameters included."""
    seen = {}

    def pack(t):
        key = (t.data_ptr(), t.numel(), t.dtype)
        seen[key] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(seen.values())


def bench_device(args, device: str) -> None:
    dtype = getattr(torch, args.dtype)
    x = torch.randn(*args.shape, device=device, dtype=dtype)
    x.requires_grad_()
    grad = torch.randn_like(x)
    ops = build_ops(args.shape[1], device)
    timer = Timer(device, args.timer)
    fwd: Dict[str, List[float]] = {n: [] for n in ops}
    bwd: Dict[str, List[float]] = {n: [] for n in ops}
    out = {}

    def forward(name):
        out[name] = ops[name](x)

    def backward(name):
        out.pop(name).backward(grad)

    for r in range(args.warmup + args.repeats):
        for name in ops:
            x.grad = None
            tf = timer(lambda: forward(name))
            tb = timer(lambda: backward(name))
            if r >= args.warmup:
                fwd[name].append(tf)
                bwd[name].append(tb)

    stat = min if args.stat == 'min' else statistics.median
    input_bytes = x.numel() * x.element_size()
    rows = []
    for name, fn in ops.items():
        f, b = stat(fwd[name]), stat(bwd[name])
        fb = stat([p + q for p, q in zip(fwd[name], bwd[name])])
        rows.append((name, f, b, fb, saved_bytes(fn, x) / input_bytes))
    silu_f, silu_b, silu_fb = [r[1:4] for r in rows if r[0] == 'SiLU'][0]

    from mmact.ops import apa_cpu_kernel
    fused = (
        device == 'cpu' and args.dtype != 'float64'
        and apa_cpu_kernel.get_kernel() is not None)
    print(f'\ndevice={device} dtype={args.dtype} shape={tuple(args.shape)} '
          f'threads={torch.get_num_threads()} timer={args.timer} '
          f'stat={args.stat} over {args.repeats} rounds; '
          f'fused APA/AGLU CPU kernel: {"on" if fused else "off"}')
    header = (f'{"operator":<36} {"fwd ms":>8} {"bwd ms":>8} '
              f'{"fwd+bwd":>8} {"fwd/SiLU":>9} {"f+b/SiLU":>9} '
              f'{"saved/input":>12}')
    print(header)
    print('-' * len(header))
    for name, f, b, fb, sb in rows:
        print(f'{name:<36} {f:8.2f} {b:8.2f} {fb:8.2f} {f / silu_f:9.2f} '
              f'{fb / silu_fb:9.2f} {sb:12.2f}')


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = [args.device]
    if args.device == 'all':
        devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    for device in devices:
        bench_device(args, device)


if __name__ == '__main__':
    main()
