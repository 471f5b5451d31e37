"""Load time of a checkpoint through mmact's allow-list against torch.load.

A torchvision ResNet-50 state dict (random weights, 25.6 M parameters,
torch's zip format, and the legacy format with ``--legacy``) is written
once and read warm from the file cache: ``torch.load(weights_only=False)``
(the baseline, which runs any code a file holds), ``mmact.checkpoint
.safe_load`` and, for reference, ``torch.load(weights_only=True)``, in
interleaved rounds. Target (#45): safe_load within 1.2x of the baseline.
Method (heap allocator, medians with min/max spread, machine line): see
``bench_utils``.

Example::

    python tools/benchmarks/benchmark_safe_load.py --repeats 9
"""
import argparse
import os.path as osp
import sys
import tempfile

import torch
import torchvision

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import bench_utils  # noqa: E402

from mmact.checkpoint import safe_load  # noqa: E402

#: safe_load / torch.load(weights_only=False), median of the rounds
TARGET = 1.2


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=9)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument(
        '--legacy',
        action='store_true',
        help='write the pre-1.6 format (model-zoo files) instead of zip')
    parser.add_argument(
        '--width',
        type=int,
        default=64,
        help='ResNet-50 width (default 64, the real one; smaller for smoke '
        'runs)')
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    """Print the table; return the ratios' (median, min, max)."""
    args = parse_args(argv)
    bench_utils.use_heap_allocator()
    torch.set_num_threads(args.threads)
    model = torchvision.models.resnet50(width_per_group=args.width)
    with tempfile.TemporaryDirectory() as folder:
        path = osp.join(folder, 'resnet50.pth')
        torch.save(
            model.state_dict(),
            path,
            _use_new_zipfile_serialization=not args.legacy)
        cases = {
            'torch.load(weights_only=False)':
            lambda: torch.load(path, map_location='cpu', weights_only=False),
            'mmact safe_load':
            lambda: safe_load(path, map_location='cpu'),
            'torch.load(weights_only=True)':
            lambda: torch.load(path, map_location='cpu', weights_only=True),
        }
        times = bench_utils.interleaved(cases, args.repeats)
        size = osp.getsize(path) / 2**20
    base = 'torch.load(weights_only=False)'
    ratios = {
        name: bench_utils.round_ratios(times, name, base)
        for name in cases
    }
    rows = [[
        name,
        bench_utils.fmt_spread(bench_utils.spread(times[name]), 1e3, 1),
        bench_utils.fmt_spread(ratios[name])
    ] for name in cases]
    layout = 'legacy' if args.legacy else 'zip'
    bench_utils.print_table(
        f'ResNet-50 state dict ({size:.0f} MiB, {layout}), warm cache, '
        f'{args.repeats} rounds; target safe_load <= {TARGET}x',
        ['load', 'ms: median [min-max]', 'x baseline: median [min-max]'], rows,
        args.threads)
    return ratios


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    run_tool(main)
