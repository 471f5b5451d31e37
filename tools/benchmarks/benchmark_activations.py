"""Time and memory of mmact activations against native ones.

For every operator and every ``--shape`` x ``--threads``: forward (with
autograd recording) + backward time, its ratio to the native baseline of the
same round (APA -> Sigmoid, everything else -> SiLU), the bytes saved
for backward relative to the input and the minor page faults per call. Method (interleaved rounds, medians with
min/max spread, heap allocator, machine line): see ``bench_utils``.

Example::

    python tools/benchmarks/benchmark_activations.py \
        --shape 8 256 56 56 --shape 16 64 56 56 --threads 1 2
"""
import argparse
import os.path as osp
import sys
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import bench_utils  # noqa: E402

#: operator -> baseline of its ratio.
BASELINE = {'mmact APA': 'Sigmoid', 'mmact APA per-channel': 'Sigmoid'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        action='append',
        help='input shape, channels at dim 1 (repeatable; default '
        '16 64 56 56 and 8 256 56 56)')
    parser.add_argument(
        '--threads',
        type=int,
        nargs='+',
        default=[torch.get_num_threads()],
        help='torch CPU thread counts to run')
    parser.add_argument(
        '--repeats', type=int, default=15, help='timed rounds per operator')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument(
        '--device',
        default='cpu',
        help="'cpu' or 'cuda' (CUDA rounds end with a synchronize)")
    parser.add_argument(
        '--ops',
        default='all',
        choices=['all', 'core'],
        help="'core': ReLU, SiLU, Sigmoid, GELU, AGLU and APA only")
    parser.add_argument(
        '--no-allocator',
        action='store_true',
        help='keep the current allocator settings (no re-exec)')
    args = parser.parse_args(argv)
    args.shape = args.shape or [[16, 64, 56, 56], [8, 256, 56, 56]]
    return args


def build_ops(channels: int,
              core: bool,
              device: str = 'cpu') -> Dict[str, Callable]:
    """name -> f(x) using learnable parameters where the op has them."""
    from mmact.ops import aglu, aglu_reference, apa, arelu, iglu, iglu_approx

    def param(*values):
        return torch.tensor(values, device=device, requires_grad=True)

    def uniform(low, high):
        return torch.empty(
            channels, device=device).uniform_(low, high).requires_grad_()

    k1, l1 = param(1.15), param(0.5)
    kc, lc = uniform(1.0, 1.3), uniform(0.0, 1.0)
    ka, la = param(-0.5), param(0.5)
    kac = uniform(-1.0, 0.0)
    alpha, beta, sigma = param(0.9), param(2.0), param(1.0)
    ops = {
        'ReLU': F.relu,
        'SiLU': F.silu,
        'Sigmoid': torch.sigmoid,
        'GELU': F.gelu,
        'mmact AGLU': lambda x: aglu(x, k1, l1),
        'mmact AGLU per-channel': lambda x: aglu(x, kc, lc),
        'mmact APA': lambda x: apa(x, ka, la),
        'mmact APA per-channel': lambda x: apa(x, kac, lc),
    }
    if not core:
        ops.update({
            'AGLU reference (paper formula)':
            lambda x: aglu_reference(x, k1.reshape(()), l1.reshape(())),
            'mmact AReLU':
            lambda x: arelu(x, alpha, beta),
            'mmact IGLU (learnable sigma)':
            lambda x: iglu(x, sigma),
            'mmact IGLUApprox (learnable sigma)':
            lambda x: iglu_approx(x, sigma),
        })
    return ops


def saved_bytes(fn: Callable, x: torch.Tensor) -> int:
    """Bytes of distinct tensors saved for backward, parameters included."""
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(seen.values())


def bench(shape: List[int], threads: int, args) -> List[Tuple]:
    """Rows of one table."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.randn(*shape, device=args.device, requires_grad=True)
    grad = torch.randn(*shape, device=args.device)
    ops = build_ops(shape[1], args.ops == 'core', args.device)
    cuda = x.device.type == 'cuda'

    def case(fn):

        def run():
            x.grad = None
            fn(x).backward(grad)
            if cuda:
                torch.cuda.synchronize()

        return run

    faults: Dict[str, List[int]] = {}
    times = bench_utils.interleaved({
        n: case(f)
        for n, f in ops.items()
    }, args.repeats, args.warmup, faults)
    from mmact.ops.cpu_build import host_isa
    isa = host_isa() if not cuda else torch.cuda.get_device_name()
    in_bytes = x.numel() * x.element_size()
    rows = []
    for name, fn in ops.items():
        base = BASELINE.get(name, 'SiLU')
        ratio = bench_utils.round_ratios(times, name, base)
        rows.append(
            (name, 'x'.join(map(str, shape)), isa, threads,
             bench_utils.fmt_spread(bench_utils.spread(times[name]),
                                    1e3), base, bench_utils.fmt_spread(ratio),
             f'{saved_bytes(fn, x) / in_bytes:.2f}',
             bench_utils.fmt_faults(faults[name])))
    return rows


HEADER = ('operator', 'shape', 'ISA', 'threads', 'fwd+bwd ms median [min-max]',
          'baseline', 'ratio median [min-max]', 'saved/input',
          'page faults/call median [max]')


def main(args) -> None:
    for shape in args.shape:
        for threads in args.threads:
            rows = bench(shape, threads, args)
            bench_utils.print_table(
                f'Activations fwd+bwd, float32 {tuple(shape)} on '
                f'{args.device}, {threads} thread(s), {args.repeats} '
                'interleaved rounds', HEADER, rows, threads)


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    cli_args = parse_args()
    bench_utils.use_heap_allocator(not cli_args.no_allocator)
    run_tool(main, cli_args)
