"""Benchmark FleS against GELU on CPU (DESIGN.md section 6).

Prints, from one run on one machine:

1. FleS (9x15 tiles) forward+backward time / GELU on a float32
   (8, 256, 64, 64) tensor (target <= 2.5x), and the bytes saved for
   backward (``torch.autograd.graph.saved_tensors_hooks``) relative to the
   input (unique storages, so a tensor saved twice counts once).
2. A PoolFormer-S12 training step (forward + backward + SGD) with
   ``act_cfg=dict(type='FleS')`` vs GELU (target <= 1.15x).

Timings are taken alternately (GELU, FleS, GELU, ...) after warm-up so both
share the machine's noise; the median and the minimum of ``--repeats`` runs
are printed (on a shared machine the minimum is the steadier estimate).

Example::

    python tools/analysis/benchmark_fles.py --threads 2
    python tools/analysis/benchmark_fles.py --skip-poolformer --threads 1
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def fwd_bwd(fn, x, grad):
    x.grad = None
    out = fn(x)
    out.backward(grad)


def timed_alternating(cases, repeats, warmup=2):
    """cases: name -> callable; returns name -> (median, min) seconds."""
    for _ in range(warmup):
        for call in cases.values():
            call()
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, call in cases.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {
        name: (statistics.median(ts), min(ts))
        for name, ts in times.items()
    }


def bench_activation(args):
    from mmact.models.activations.fles import FleS
    torch.manual_seed(0)
    shape = tuple(args.shape)
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    fles = FleS(channels=shape[1], window_size=tuple(args.window))
    fles_ref = FleS(channels=shape[1], window_size=tuple(args.window),
                    fused=False)
    gelu = nn.GELU()
    cases = {
        'GELU': lambda: fwd_bwd(gelu, x, grad),
        'FleS': lambda: fwd_bwd(fles, x, grad),
    }
    if args.with_composite:
        cases['FleS composite'] = lambda: fwd_bwd(fles_ref, x, grad)
    med = timed_alternating(cases, args.repeats)
    in_bytes = x.numel() * x.element_size()
    print(f'== activation fwd+bwd, float32 {shape}, window {args.window}, '
          f'{torch.get_num_threads()} threads')
    mods = {'GELU': gelu, 'FleS': fles, 'FleS composite': fles_ref}
    for name, (sec, best) in med.items():
        sb = saved_bytes(mods[name], x)
        print(f"{name:16s} median {sec * 1e3:7.1f} ms "
              f"x{sec / med['GELU'][0]:.2f}"
              f'  min {best * 1e3:7.1f} ms x{best / med["GELU"][1]:.2f}'
              f'  saved-for-backward {sb / in_bytes:.3f} x input '
              f'({sb / 2**20:.1f} MiB)')
    print(f'FleS / GELU time ratio: median '
          f'{med["FleS"][0] / med["GELU"][0]:.2f}, min '
          f'{med["FleS"][1] / med["GELU"][1]:.2f} (target <= 2.5)')


def bench_poolformer(args):
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS

    import mmact  # noqa: F401  (registers FleS)
    from mmact.models.activations.fles import materialize_lazy_modules
    torch.manual_seed(0)
    batch = args.batch
    x = torch.randn(batch, 3, args.size, args.size)
    target = torch.randint(0, 1000, (batch, ))

    def build(act_cfg):
        torch.manual_seed(0)
        model = nn.Sequential()
        model.add_module(
            'backbone',
            PRETRAIN_MODELS.build(
                dict(type='PoolFormer', arch='s12', act_cfg=act_cfg)))
        model.add_module('pool', nn.AdaptiveAvgPool2d(1))
        model.add_module('flat', nn.Flatten())
        model.add_module('fc', nn.Linear(512, 1000))

        class Net(nn.Module):

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, inp):
                feats = self.inner.backbone(inp)[-1]
                return self.inner.fc(self.inner.flat(self.inner.pool(feats)))

        net = Net(model)
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

    cases = {name: (lambda m=m: step(*m)) for name, m in models.items()}
    med = timed_alternating(cases, args.pf_repeats, warmup=1)
    nparams = {
        name: sum(p.numel() for p in m[0].parameters())
        for name, m in models.items()
    }
    print(f'== PoolFormer-S12 train step (fwd+bwd+SGD), batch {batch}x3x'
          f'{args.size}x{args.size}, {torch.get_num_threads()} threads')
    for name, (sec, best) in med.items():
        print(f'{name:6s} median {sec:6.3f} s x{sec / med["GELU"][0]:.3f}'
              f'  min {best:6.3f} s x{best / med["GELU"][1]:.3f}'
              f'  params {nparams[name] / 1e6:.2f}M')
    print(f'FleS / GELU train-step ratio: median '
          f'{med["FleS"][0] / med["GELU"][0]:.3f}, min '
          f'{med["FleS"][1] / med["GELU"][1]:.3f} (target <= 1.15)')


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shape', type=int, nargs=4, default=[8, 256, 64, 64])
    parser.add_argument('--window', type=int, nargs=2, default=[9, 15])
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--with-composite', action='store_true',
                        help='also time the composite (autograd) FleS')
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--pf-repeats', type=int, default=5)
    parser.add_argument('--skip-activation', action='store_true')
    parser.add_argument('--skip-poolformer', action='store_true')
    parser.add_argument('--threads', type=int, default=None)
    return parser.parse_args()


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.skip_activation:
        bench_activation(args)
    if not args.skip_poolformer:
        bench_poolformer(args)


if __name__ == '__main__':
    main()
