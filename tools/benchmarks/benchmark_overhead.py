"""Host cost per activation call: tensors so small that compute is
negligible, so the time is the Python, dispatch and autograd around the
kernels.

For each module (as a model calls it: ``nn.SiLU``, ``AGLU()``, ...) and
each mode, the time per call of ``--calls`` calls in a row, over ``--repeats``
interleaved rounds, with its ratio to the native baseline of the same round
(AGLU -> SiLU, APA -> Sigmoid, FleS -> GELU):

- ``train``: forward with autograd recording + backward;
- ``eval``: forward in ``eval()`` under ``torch.no_grad()``.

Targets (#23): train AGLU / APA <= 1.5x, FleS <= 3x; eval <= 1.3x. Method
(heap allocator, medians with min/max spread, machine line): see
``bench_utils``. On a GPU (``--device cuda``) the same table is the Triton
path's launch cost (CPU time per call; each round synchronises once).

``--json`` writes the figures, with a ``summary`` of the median ratios
AGLU / SiLU, APA / Sigmoid and FleS / GELU per mode under ``--summary-key``
(train) and ``<key>_eval`` (eval), the keys of
``tools/gpu/gpu_check.sh``'s gpu.json.

Example::

    python tools/benchmarks/benchmark_overhead.py --threads 1
"""
import argparse
import gc
import json
import os.path as osp
import sys
from typing import Callable, Dict

import torch
import torch.nn as nn

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import bench_utils  # noqa: E402

#: module -> (baseline, target ratio in train mode); PReLU (a native
#: activation with one parameter) shows what a learnable parameter costs.
TARGETS = {
    'PReLU': ('SiLU', None),
    'AGLU': ('SiLU', 1.5),
    'AGLU per-channel': ('SiLU', 1.5),
    'APA': ('Sigmoid', 1.5),
    'APA per-channel': ('Sigmoid', 1.5),
    'FleS (global)': ('GELU', 3.0),
}
EVAL_TARGET = 1.3


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--shape',
        type=int,
        nargs='+',
        default=[2, 32, 4, 4],
        help='input shape (default: 2 32 4 4)')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument(
        '--calls', type=int, default=400, help='calls per round')
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--json', help='write the figures to this file')
    parser.add_argument(
        '--summary-key',
        default='host_cost',
        help='name of the summary in the JSON (default host_cost)')
    parser.add_argument(
        '--no-allocator',
        action='store_true',
        help='keep the current allocator settings (no re-exec)')
    return parser.parse_args(argv)


def build_modules(channels: int, device: str) -> Dict[str, nn.Module]:
    import mmact  # noqa: F401
    from mmact.models.activations import AGLU, APA, FleS
    mods = {
        'SiLU': nn.SiLU(),
        'Sigmoid': nn.Sigmoid(),
        'GELU': nn.GELU(),
        'PReLU': nn.PReLU(),
        'AGLU': AGLU(),
        'AGLU per-channel': AGLU(num_parameters=channels),
        'APA': APA(),
        'APA per-channel': APA(num_parameters=channels),
        'FleS (global)': FleS(channels=channels),
    }
    return {name: m.to(device) for name, m in mods.items()}


def _calls(fn: Callable[[], None], n: int, sync: bool) -> Callable[[], None]:

    def run():
        for _ in range(n):
            fn()
        if sync:
            torch.cuda.synchronize()

    return run


def main(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    sync = device.type == 'cuda'
    x = torch.randn(*args.shape, device=device, requires_grad=True)
    grad = torch.randn(*args.shape, device=device)
    modules = build_modules(args.shape[1], args.device)
    # The collector's full passes scan every object made at import (some
    # 300k with mmdet, tens of ms each) and land at random in a round;
    # frozen, they are left out of the passes, for every module alike.
    gc.collect()
    gc.freeze()

    def train_step(m):

        def step():
            m(x).backward(grad)

        return step

    def eval_step(m):

        def step():
            with torch.no_grad():
                m(x)

        return step

    figures = {}
    summary = {}
    for mode, make in (('train', train_step), ('eval', eval_step)):
        for m in modules.values():
            m.train(mode == 'train')
        times = bench_utils.interleaved(
            {
                name: _calls(make(m), args.calls, sync)
                for name, m in modules.items()
            }, args.repeats, args.warmup)
        rows = []
        for name in modules:
            per_call = bench_utils.spread(
                [t / args.calls for t in times[name]])
            base, target = TARGETS.get(name, (None, None))
            if mode == 'eval':
                target = EVAL_TARGET if target else None
            ratio = (
                bench_utils.fmt_spread(
                    bench_utils.round_ratios(times, name, base))
                if base else '')
            figures.setdefault(mode, {})[name] = dict(
                us_per_call=per_call[0] * 1e6,
                ratio=(bench_utils.round_ratios(times, name, base)[0]
                       if base else None),
                baseline=base)
            rows.append((name, bench_utils.fmt_spread(per_call, 1e6, 1), base
                         or '', ratio, f'<= {target}' if target else ''))
        what = ('forward + backward'
                if mode == 'train' else 'forward, eval() + no_grad')
        bench_utils.print_table(
            f'Host cost per call, {what}, float32 {tuple(args.shape)} on '
            f'{args.device}, {args.threads} thread(s), {args.calls} calls x '
            f'{args.repeats} interleaved rounds',
            ('module', 'us per call median [min-max]', 'baseline',
             'ratio median [min-max]', 'target'), rows, args.threads)
        key = args.summary_key + ('' if mode == 'train' else '_eval')
        summary[key] = {
            short: figures[mode][name]['ratio']
            for short, name in (('aglu_silu', 'AGLU'), ('apa_sigmoid', 'APA'),
                                ('fles_gelu', 'FleS (global)'))
        }
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(
                dict(
                    header=dict(
                        device=args.device,
                        shape=list(args.shape),
                        calls=args.calls,
                        repeats=args.repeats,
                        machine=bench_utils.machine_line(args.threads)),
                    summary=summary,
                    **figures),
                f,
                indent=1)


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    cli_args = parse_args()
    bench_utils.use_heap_allocator(not cli_args.no_allocator)
    run_tool(main, cli_args)
