"""Training-step cost of APA*+AGLU SE-ResNet-50 against SE-ResNet-50 (ReLU).

Both models are :class:`mmact.models.backbones.ActResNet` (depth 50) with a
global-pooling + linear classifier and cross-entropy, trained by SGD with
momentum on the CPU, in one process:

- baseline:  ``act_cfg=ReLU(inplace)``, ``attention_cfg=SEAttention``
- candidate: ``act_cfg=AGLU``,          ``attention_cfg=APASELayer`` (APA*)
- the candidate with ``recompute_act=True`` (AGLU inputs rebuilt in backward
  from tensors BN / the attention product keep anyway)

Time: wall-clock of ``zero_grad + forward + backward + step``; the models
alternate step by step (after warm-up) so that load from other processes on a
shared machine hits all alike; ratios are taken per round and reported as the
median with the min/max spread (method, heap allocator and machine line: see
``bench_utils``).

Peak memory: tracemalloc cannot see torch's allocations and process RSS mixes
in allocator caching and the other model, so each model's step is profiled
once with ``torch.profiler`` (``profile_memory=True``) and its memory
timeline (``export_memory_timeline``: every CPU tensor allocation and free,
categorised as parameter / gradient / optimizer state / activation / ...) is
summed over categories at each instant; the peak is the maximum of that sum.
Gradients are released before each step (``set_to_none``), so the peak holds
parameters, optimizer state, activations saved for backward and gradients.
A second, independent figure is the bytes of distinct storages saved for
backward during the forward (``saved_tensors_hooks``).

Targets: time ratio <= 1.10, peak-memory ratio <= 1.03; the memory-lean
mode is the default of ``ActResNet`` for activations that cannot run in
place.

``--compile`` times instead each of the ReLU baseline and the memory-lean
APA*+AGLU model eager and under ``torch.compile`` (``--compile-backend``,
default inductor; compilation happens in the warm-up steps, which are not
timed): compiled / eager per model, and the compiled APA*+AGLU against the
compiled baseline.

Usage::

    python tools/benchmarks/benchmark_backbone.py [--batch 4] [--size 224]
        [--steps 11] [--warmup 2] [--threads 2] [--compile]
"""
import argparse
import json
import os
import os.path as osp
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

import bench_utils  # noqa: E402
import mmact  # noqa: E402,F401
from mmact.models.backbones import ActResNet  # noqa: E402

#: Targets of the memory-lean model against its baseline: step time and
#: peak memory ratios (medians of the rounds).
TIME_TARGET = 1.10
MEMORY_TARGET = 1.03

CONFIGS = {
    'SE-ResNet ReLU':
    dict(
        act_cfg=dict(type='ReLU', inplace=True),
        attention_cfg=dict(type='SEAttention')),
    'APA*+AGLU (saves inputs)':
    dict(
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer'),
        recompute_act=False),
    'APA*+AGLU (memory-lean)':
    dict(
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer'),
        recompute_act=True),
}


class Classifier(nn.Module):
    """Backbone + global average pooling + linear head."""

    def __init__(self, depth: int = 50, **backbone_cfg) -> None:
        super().__init__()
        self.backbone = ActResNet(depth, **backbone_cfg)
        self.fc = nn.Linear(self.backbone.feat_dim, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.backbone(x)[-1].mean((2, 3)))


def make_step(model: nn.Module, images: torch.Tensor,
              labels: torch.Tensor) -> Callable[[], None]:
    """One SGD training step as a closure."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        opt.step()

    return step


def peak_bytes(step: Callable[[], None]) -> int:
    """Peak of live CPU tensor bytes during one step (profiler timeline)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter('ignore', FutureWarning)  # deprecated, works
        path = os.path.join(tmp, 'timeline.json')
        prof.export_memory_timeline(path, device='cpu')
        with open(path) as f:
            _, sizes = json.load(f)
    return max(sum(row) for row in sizes)


def saved_bytes(model: nn.Module, images: torch.Tensor,
                labels: torch.Tensor) -> int:
    """Bytes of distinct storages saved for backward by one forward."""
    seen: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(n for ptr, n in seen.items() if ptr not in params)


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batch', type=int, default=4)
    parser.add_argument('--size', type=int, default=224)
    # Five rounds put the same code at 1.135 and 1.180 on idle cores.
    parser.add_argument(
        '--steps', type=int, default=11, help='timed rounds per model')
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument(
        '--depth', type=int, default=50, help='ResNet depth (tests: 18)')
    parser.add_argument(
        '--compile',
        action='store_true',
        help='time eager against torch.compile (see the module docstring)')
    parser.add_argument('--compile-backend', default='inductor')
    parser.add_argument(
        '--no-allocator',
        action='store_true',
        help='keep the current allocator settings (no re-exec)')
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> Dict[str, Dict[str, float]]:
    """Run the benchmark, print the table and return the ratios."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(0, 1000, (args.batch, ))

    models = {
        name: Classifier(args.depth, **cfg).train()
        for name, cfg in CONFIGS.items()
    }
    steps = {n: make_step(m, images, labels) for n, m in models.items()}
    faults: Dict[str, List[int]] = {}
    times = bench_utils.interleaved(steps, args.steps, args.warmup, faults)
    peaks = {name: peak_bytes(step) for name, step in steps.items()}
    saved = {n: saved_bytes(m, images, labels) for n, m in models.items()}

    from mmact.ops.cpu_build import host_isa
    base = list(CONFIGS)[0]
    result, rows = {}, []
    for name in CONFIGS:
        ratio = bench_utils.round_ratios(times, name, base)
        result[name] = dict(
            time_ratio=ratio[0],
            time_ratio_min=ratio[1],
            time_ratio_max=ratio[2],
            peak_memory_ratio=peaks[name] / peaks[base],
            saved_ratio=saved[name] / saved[base])
        rows.append(
            (name, host_isa(), args.threads,
             bench_utils.fmt_spread(bench_utils.spread(times[name]), 1,
                                    3), bench_utils.fmt_spread(ratio, 1, 3),
             f'{peaks[name] / 2**20:.0f}', f'{peaks[name] / peaks[base]:.3f}',
             f'{saved[name] / saved[base]:.3f}',
             bench_utils.fmt_faults(faults[name])))
    bench_utils.print_table(
        f'ResNet-{args.depth} training step (fwd+bwd+SGD), batch '
        f'{args.batch}x3x{args.size}x{args.size}, {args.steps} interleaved '
        f'rounds; targets: time ratio <= {TIME_TARGET:.2f}, peak memory '
        f'ratio <= {MEMORY_TARGET:.2f}',
        ('model', 'ISA', 'threads', 'step s median [min-max]',
         f'ratio to {base} median [min-max]', 'peak MiB', 'peak memory ratio',
         'saved-for-backward ratio', 'page faults/step median [max]'), rows,
        args.threads)
    return result


def compile_main(args: argparse.Namespace) -> Dict[str, List[float]]:
    """Time eager against compiled steps; print the table and return the
    ratios (median, min, max) by row name."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(0, 1000, (args.batch, ))
    steps, pairs = {}, []
    for name in ('SE-ResNet ReLU', 'APA*+AGLU (memory-lean)'):
        model = Classifier(args.depth, **CONFIGS[name]).train()
        compiled = torch.compile(model, backend=args.compile_backend)
        steps[name] = make_step(model, images, labels)
        steps[f'{name}, compiled'] = make_step(compiled, images, labels)
        pairs.append((f'{name}, compiled', name))
    relu, aglu = (p[0] for p in pairs)
    pairs.append((aglu, relu))
    # the warm-up rounds compile (forward and backward graphs)
    times = bench_utils.interleaved(steps, args.steps, max(args.warmup, 1))
    result, rows = {}, []
    for name, base in pairs:
        ratio = bench_utils.round_ratios(times, name, base)
        result[f'{name} / {base}'] = ratio
        rows.append(
            (name, base,
             bench_utils.fmt_spread(bench_utils.spread(times[name]), 1, 3),
             bench_utils.fmt_spread(bench_utils.spread(times[base]), 1,
                                    3), bench_utils.fmt_spread(ratio, 1, 3)))
    bench_utils.print_table(
        f'ResNet-{args.depth} training step (fwd+bwd+SGD), torch.compile '
        f'(backend {args.compile_backend}) against eager, batch '
        f'{args.batch}x3x{args.size}x{args.size}, {args.steps} interleaved '
        'rounds', ('model', 'against', 'step s median [min-max]',
                   'baseline step s', 'ratio median [min-max]'), rows,
        args.threads)
    return result


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    cli_args = parse_args()
    bench_utils.use_heap_allocator(not cli_args.no_allocator)
    run_tool(compile_main if cli_args.compile else main, cli_args)
