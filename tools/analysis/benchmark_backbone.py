"""Training-step cost of APA*+AGLU SE-ResNet-50 against SE-ResNet-50 (ReLU).

Both models are :class:`mmact.models.backbones.ActResNet` (depth 50) with a
global-pooling + linear classifier and cross-entropy, trained by SGD with
momentum on the CPU, in one process:

- baseline:  ``act_cfg=ReLU(inplace)``, ``attention_cfg=SEAttention``
- candidate: ``act_cfg=AGLU``,          ``attention_cfg=APASELayer`` (APA*)
- the candidate with ``recompute_act=True`` (AGLU inputs rebuilt in backward
  from tensors BN / the attention product keep anyway)

Time: wall-clock of ``zero_grad + forward + backward + step``; the two models
alternate step by step (after warm-up) so that load from other processes on a
shared machine hits both alike; the ratio of the medians is reported.

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

DESIGN §6 targets: time ratio <= 1.10, peak-memory ratio <= 1.03.

Usage::

    python tools/analysis/benchmark_backbone.py [--batch 4] [--size 224]
        [--steps 5] [--warmup 2] [--threads 2]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mmact  # noqa: E402,F401
from mmact.models.backbones import ActResNet  # noqa: E402

CONFIGS = {
    'SE-R50 ReLU':
    dict(
        act_cfg=dict(type='ReLU', inplace=True),
        attention_cfg=dict(type='SEAttention')),
    'APA*+AGLU R50':
    dict(act_cfg=dict(type='AGLU'), attention_cfg=dict(type='APASELayer')),
    'APA*+AGLU R50 recompute':
    dict(
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer'),
        recompute_act=True),
}


class Classifier(nn.Module):
    """Backbone + global average pooling + linear head."""

    def __init__(self, **backbone_cfg) -> None:
        super().__init__()
        self.backbone = ActResNet(50, **backbone_cfg)
        self.fc = nn.Linear(2048, 1000)

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


def main(argv: List[str] = None) -> Dict[str, Dict[str, float]]:
    """Run the benchmark and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batch', type=int, default=4)
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(0, 1000, (args.batch, ))

    models = {name: Classifier(**cfg).train() for name, cfg in CONFIGS.items()}
    steps = {n: make_step(m, images, labels) for n, m in models.items()}
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    times: Dict[str, List[float]] = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    peaks = {name: peak_bytes(step) for name, step in steps.items()}
    saved = {n: saved_bytes(m, images, labels) for n, m in models.items()}

    base = list(CONFIGS)[0]
    print(f'torch {torch.__version__}, {args.threads} threads, input '
          f'{args.batch}x3x{args.size}x{args.size}, {args.steps} timed steps')
    for name in CONFIGS:
        print(f'{name:>24}: step median {statistics.median(times[name]):.3f}s'
              f' (min {min(times[name]):.3f}s), peak {peaks[name] / 2**20:.1f}'
              f' MiB, saved-for-backward {saved[name] / 2**20:.1f} MiB, '
              f'params {sum(p.numel() for p in models[name].parameters())}')
    result = {}
    for cand in list(CONFIGS)[1:]:
        ratios = dict(
            time_ratio=statistics.median(times[cand]) /
            statistics.median(times[base]),
            time_ratio_min=min(times[cand]) / min(times[base]),
            peak_memory_ratio=peaks[cand] / peaks[base],
            saved_ratio=saved[cand] / saved[base])
        result[cand] = ratios
        print(f'{cand} / {base}: time ratio {ratios["time_ratio"]:.3f} '
              f'(medians; {ratios["time_ratio_min"]:.3f} from minima; '
              f'target <= 1.10), peak memory ratio '
              f'{ratios["peak_memory_ratio"]:.3f} (target <= 1.03), '
              f'saved-for-backward ratio {ratios["saved_ratio"]:.3f}')
    return result


if __name__ == '__main__':
    main()
