"""Benchmark FleS against GELU on the CPU.

Prints, for every ``--shape`` x ``--threads``:

1. FleS (``--window``, default 9x15 tiles) forward+backward time and its
   per-round ratio to GELU (target <= 2.5x), and the bytes saved for
   backward relative to the input (unique storages).
2. With ``--profile``: where FleS's time goes, per stage of the fused op
   (``torch.profiler`` ranges ``fles.*``): window statistics, scale MLP,
   gate (window values expanded inside the gate loop), backward MLP, backward
   gate with the window reductions of the scale gradients, indicator
   backward (expansion of the indicator gradient), and the rest (autograd,
   allocation).
3. Unless ``--skip-poolformer``: a PoolFormer-S12 training step
   (forward + backward + SGD) with ``act_cfg=dict(type='FleS')`` vs GELU
   (target <= 1.15x).

Method (interleaved rounds, medians with min/max spread, heap allocator,
machine line): see ``bench_utils``.

Example::

    python tools/benchmarks/benchmark_fles.py --shape 8 256 56 56 \
        --shape 16 64 56 56 --threads 1 2 --profile --skip-poolformer
"""
import argparse
import os.path as osp
import sys
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import bench_utils  # noqa: E402

#: profiler range -> stage name in the table.
STAGES = {
    'fles.stats': 'window statistics (fwd)',
    'fles.mlp': 'scale MLP (fwd)',
    'fles.apply': 'gate + window expansion (fwd)',
    'fles.bwd.mlp': 'scale MLP (bwd)',
    'fles.bwd.gate': 'gate bwd + window reductions',
    'fles.bwd.indicator': 'indicator bwd (expansion)',
}


def saved_bytes(fn, x):
    """Bytes saved for backward by ``fn(x)`` (unique storages)."""
    storages = {}

    def pack(t):
        try:
            key = t.untyped_storage().data_ptr()
            storages[key] = t.untyped_storage().nbytes()
        except Exception:  # noqa: BLE001 (e.g. tensors without storage)
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x)
    del out
    return sum(storages.values())


def _setup(shape, window):
    from mmact.models.activations.fles import FleS
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    fles = FleS(channels=shape[1], window_size=tuple(window))
    return x, grad, fles


def _fwd_bwd(fn, x, grad):

    def run():
        x.grad = None
        fn(x).backward(grad)

    return run


def bench_activation(shape, threads, args) -> List[tuple]:
    from mmact.ops.cpu_build import host_isa
    torch.set_num_threads(threads)
    x, grad, fles = _setup(shape, args.window)
    mods = {'GELU': nn.GELU(), 'FleS': fles}
    if args.with_composite:
        from mmact.models.activations.fles import FleS
        mods['FleS composite'] = FleS(
            channels=shape[1], window_size=tuple(args.window), fused=False)
    faults: Dict[str, List[int]] = {}
    times = bench_utils.interleaved(
        {
            n: _fwd_bwd(m, x, grad)
            for n, m in mods.items()
        }, args.repeats, args.warmup, faults)
    in_bytes = x.numel() * x.element_size()
    rows = []
    for name, mod in mods.items():
        rows.append(
            (name, 'x'.join(map(str, shape)), 'x'.join(map(str, args.window)),
             host_isa(), threads,
             bench_utils.fmt_spread(bench_utils.spread(times[name]), 1e3),
             bench_utils.fmt_spread(
                 bench_utils.round_ratios(times, name, 'GELU')),
             f'{saved_bytes(mod, x) / in_bytes:.3f}',
             bench_utils.fmt_faults(faults[name])))
    return rows


def profile_stages(shape, threads, args) -> List[tuple]:
    """Per-stage times of FleS fwd+bwd (ms per call) and GELU's."""
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(threads)
    x, grad, fles = _setup(shape, args.window)
    run, gelu = _fwd_bwd(fles, x, grad), _fwd_bwd(nn.GELU(), x, grad)
    for _ in range(args.warmup):
        run()
        gelu()
    calls = max(args.repeats // 2, 1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            with torch.profiler.record_function('fles.total'):
                run()
            with torch.profiler.record_function('gelu.total'):
                gelu()
    totals: Dict[str, float] = {}
    for evt in prof.key_averages():
        totals[evt.key] = evt.cpu_time_total / 1e3 / calls  # ms per call
    total = totals.get('fles.total', float('nan'))
    rows = []
    staged = 0.0
    for key, label in STAGES.items():
        ms = totals.get(key, 0.0)
        staged += ms
        rows.append((label, key, f'{ms:.2f}', f'{100 * ms / total:.1f}'))
    rows.append(
        ('other (autograd, allocation, Python)', '-', f'{total - staged:.2f}',
         f'{100 * (total - staged) / total:.1f}'))
    rows.append(('FleS fwd+bwd total', 'fles.total', f'{total:.2f}', '100'))
    gelu_ms = totals.get('gelu.total', float('nan'))
    rows.append(('GELU fwd+bwd (same profile)', 'gelu.total', f'{gelu_ms:.2f}',
                 f'{100 * gelu_ms / total:.1f}'))
    return rows


def bench_poolformer(args):
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS

    import mmact  # noqa: F401  (registers FleS)
    from mmact.models.utils import materialize_lazy_modules
    torch.manual_seed(0)
    batch = args.batch
    x = torch.randn(batch, 3, args.size, args.size)
    target = torch.randint(0, 1000, (batch, ))

    class Net(nn.Module):

        def __init__(self, act_cfg):
            super().__init__()
            self.backbone = PRETRAIN_MODELS.build(
                dict(type='PoolFormer', arch='s12', act_cfg=act_cfg))
            self.fc = nn.Linear(512, 1000)

        def forward(self, inp):
            feats = self.backbone(inp)[-1]
            return self.fc(feats.mean((2, 3)))

    def build(act_cfg):
        torch.manual_seed(0)
        net = Net(act_cfg)
        materialize_lazy_modules(net, x[:1])
        net.train()
        optim = build_optim_wrapper(
            net, dict(optimizer=dict(type='SGD', lr=1e-3, momentum=0.9)))
        return net, optim

    models = {
        'GELU': build(dict(type='GELU')),
        'FleS': build(dict(type='FleS')),
    }

    def step(net, optim):
        loss = F.cross_entropy(net(x), target)
        optim.update_params(loss)

    threads = torch.get_num_threads()
    times = bench_utils.interleaved(
        {
            name: (lambda m=m: step(*m))
            for name, m in models.items()
        }, args.pf_repeats, 1)
    from mmact.ops.cpu_build import host_isa
    rows = [(name, host_isa(), threads,
             bench_utils.fmt_spread(bench_utils.spread(times[name]), 1, 3),
             bench_utils.fmt_spread(
                 bench_utils.round_ratios(times, name, 'GELU'), 1,
                 3), f'{sum(p.numel() for p in m[0].parameters()) / 1e6:.2f}M')
            for name, m in models.items()]
    bench_utils.print_table(
        f'PoolFormer-S12 train step (fwd+bwd+SGD), batch {batch}x3x'
        f'{args.size}x{args.size}, {args.pf_repeats} interleaved rounds',
        ('model', 'ISA', 'threads', 'step s median [min-max]',
         'ratio to GELU median [min-max]', 'params'), rows, threads)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--shape',
        type=int,
        nargs=4,
        action='append',
        help='N C H W (repeatable; default 8 256 56 56 and 16 64 56 56)')
    parser.add_argument('--window', type=int, nargs=2, default=[9, 15])
    parser.add_argument(
        '--threads', type=int, nargs='+', default=[torch.get_num_threads()])
    parser.add_argument('--repeats', type=int, default=11)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument(
        '--with-composite',
        action='store_true',
        help='also time the composite (autograd) FleS')
    parser.add_argument(
        '--profile', action='store_true', help='per-stage time table')
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--pf-repeats', type=int, default=5)
    parser.add_argument('--skip-activation', action='store_true')
    parser.add_argument('--skip-poolformer', action='store_true')
    parser.add_argument(
        '--no-allocator',
        action='store_true',
        help='keep the current allocator settings (no re-exec)')
    args = parser.parse_args(argv)
    args.shape = args.shape or [[8, 256, 56, 56], [16, 64, 56, 56]]
    return args


def main(args) -> None:
    if not args.skip_activation:
        for shape in args.shape:
            for threads in args.threads:
                rows = bench_activation(shape, threads, args)
                bench_utils.print_table(
                    f'FleS fwd+bwd vs GELU, float32 {tuple(shape)}, '
                    f'{threads} thread(s), {args.repeats} interleaved rounds',
                    ('activation', 'shape', 'window', 'ISA', 'threads',
                     'fwd+bwd ms median [min-max]',
                     'ratio to GELU median [min-max]', 'saved/input',
                     'page faults/call median [max]'), rows, threads)
                if args.profile:
                    bench_utils.print_table(
                        f'FleS per-stage profile, float32 {tuple(shape)}, '
                        f'window {tuple(args.window)}, {threads} thread(s) '
                        '(ms per fwd+bwd)',
                        ('stage', 'profiler range', 'ms', '% of FleS'),
                        profile_stages(shape, threads, args), threads)
    if not args.skip_poolformer:
        torch.set_num_threads(args.threads[-1])
        bench_poolformer(args)


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    cli_args = parse_args()
    bench_utils.use_heap_allocator(not cli_args.no_allocator)
    run_tool(main, cli_args)
