"""GPU cost of the mmact activations (fused Triton kernels) vs native ones.

Prints, from one run on one CUDA device:

1. ``ops``: forward+backward time of APA / AGLU (shared and per-channel
   parameters) against Sigmoid / SiLU / GELU, float32 and bfloat16, on a
   tensor larger than the L2 cache; also the torch fallback path
   (``backends.using(triton='off')``, as ``MMACT_TRITON=0``) and the bytes
   saved for backward over input bytes.
   Targets: AGLU / APA <= 1.3x SiLU / Sigmoid.
2. ``fles``: FleS with 9x15 windows, forward+backward, against GELU
   (target <= 1.5x).
3. ``backbone``: an SE-ResNet-50 training step (SGD, cross-entropy) with
   APA* attention + AGLU against SE-ResNet-50 with ReLU:
   time and ``torch.cuda.max_memory_allocated`` ratios (targets <= 1.05x),
   in float32 and with bfloat16 autocast.

Operator times are medians of ``triton.testing.do_bench`` (CUDA events),
taken twice in alternating order; the spread between the two rounds is
printed. Gradients are taken with ``torch.autograd.grad`` (no accumulation
pass). Step times are medians over steps that alternate between the models
in blocks; peak memory is measured for each model alone.

Usage::

    python tools/benchmarks/benchmark_cuda.py [--parts ops fles backbone]
        [--batch 64] [--steps 20] [--json results.json]
"""
import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mmact.ops import aglu, apa, backends  # noqa: E402

OP_SHAPE = (32, 256, 56, 56)  # 103 MB in float32: twice the H100's L2
FLES_SHAPE = (32, 256, 64, 64)


def bench(fn: Callable[[], object]) -> float:
    """Median milliseconds of ``fn`` (CUDA events, warm-up excluded)."""
    import triton.testing
    return triton.testing.do_bench(
        fn, warmup=50, rep=200, return_mode='median')


def timed_rounds(cases: Dict[str, Callable], rounds: int = 2) -> Dict:
    """name -> (median ms over rounds, relative spread between rounds);
    rounds alternate the order of the cases."""
    times: Dict[str, List[float]] = {name: [] for name in cases}
    order = list(cases)
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            times[name].append(bench(cases[name]))
    return {
        n: (statistics.median(t), (max(t) - min(t)) / min(t))
        for n, t in times.items()
    }


def saved_ratio(fn: Callable[[torch.Tensor], torch.Tensor],
                x: torch.Tensor) -> float:
    """Bytes of distinct storages saved for backward / bytes of ``x``."""
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(storages.values()) / (x.numel() * x.element_size())


def fwd_bwd(fn: Callable, x: torch.Tensor, go: torch.Tensor,
            params: List[torch.Tensor]) -> Callable[[], None]:
    inputs = [x] + params

    def run():
        torch.autograd.grad(fn(x), inputs, go)

    return run


def _no_grad(fn: Callable, x: torch.Tensor) -> Callable[[], None]:

    def run():
        with torch.no_grad():
            fn(x)

    return run


def op_cases(dtype: torch.dtype) -> Dict[str, tuple]:
    """name -> (function of x, parameters, baseline name)."""
    channels = OP_SHAPE[1]
    dev = 'cuda'

    def p(value, n):
        return torch.full((n, ), value, device=dev, requires_grad=True)

    k1, l1 = p(1.1, 1), p(0.6, 1)
    kc, lc = p(1.1, channels), p(0.6, channels)
    return {
        'Sigmoid': (torch.sigmoid, [], None),
        'SiLU': (F.silu, [], None),
        'GELU': (F.gelu, [], None),
        'APA': (lambda x: apa(x, k1, l1), [k1, l1], 'Sigmoid'),
        'APA per-channel': (lambda x: apa(x, kc, lc), [kc, lc], 'Sigmoid'),
        'AGLU': (lambda x: aglu(x, k1, l1), [k1, l1], 'SiLU'),
        'AGLU per-channel': (lambda x: aglu(x, kc, lc), [kc, lc], 'SiLU'),
    }


def run_ops(results: Dict) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(OP_SHAPE, device='cuda', dtype=dtype) * 3
        x.requires_grad_()
        go = torch.randn_like(x)
        cases = op_cases(dtype)
        runs = {n: fwd_bwd(fn, x, go, ps) for n, (fn, ps, _) in cases.items()}
        times = timed_rounds(runs)
        with backends.using(triton='off'):
            torch_times = timed_rounds(
                {n + ' (torch path)': runs[n]
                 for n in ('APA', 'AGLU')})
        fwd_times = timed_rounds(
            {
                n: _no_grad(fn, x.detach())
                for n, (fn, _, _) in cases.items()
            }, 1)
        name = str(dtype).replace('torch.', '')
        print(f'\n== fwd+bwd {name} {tuple(OP_SHAPE)} '
              f'({x.numel() * x.element_size() / 1e6:.0f} MB)')
        print(f'{"op":>26} {"fwd+bwd ms":>10} {"spread":>7} {"fwd ms":>7} '
              f'{"ratio":>6} {"saved/input":>11}')
        table = {}
        for n, (fn, _, base) in cases.items():
            ratio = times[n][0] / times[base][0] if base else None
            saved = saved_ratio(fn, x)
            table[n] = dict(
                ms=times[n][0],
                spread=times[n][1],
                fwd_ms=fwd_times[n][0],
                ratio=ratio,
                saved_over_input=saved,
                baseline=base)
            print(f'{n:>26} {times[n][0]:10.3f} {times[n][1]:7.1%} '
                  f'{fwd_times[n][0]:7.3f} '
                  f'{"" if ratio is None else f"{ratio:.2f}x":>6} '
                  f'{saved:11.2f}')
        for n, (ms, spread) in torch_times.items():
            base = cases[n.split(' ')[0]][2]
            table[n] = dict(
                ms=ms, spread=spread, ratio=ms / times[base][0], baseline=base)
            print(f'{n:>26} {ms:10.3f} {spread:7.1%} {"":>7} '
                  f'{ms / times[base][0]:5.2f}x')
        results[f'ops_{name}'] = table
        del x, go


def run_fles(results: Dict) -> None:
    from mmact.models.activations.fles import FleS
    shape = FLES_SHAPE
    table = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device='cuda', dtype=dtype)
        x.requires_grad_()
        go = torch.randn_like(x)
        fles = FleS(channels=shape[1], window_size=(9, 15)).cuda()
        params = list(fles.parameters())
        runs = {
            'GELU': fwd_bwd(F.gelu, x, go, []),
            'FleS 9x15': fwd_bwd(fles, x, go, params),
        }
        times = timed_rounds(runs)
        with backends.using(triton='off'):
            torch_time = timed_rounds(
                {'FleS 9x15 (torch path)': runs['FleS 9x15']})
        times.update(torch_time)
        name = str(dtype).replace('torch.', '')
        print(f'\n== FleS fwd+bwd {name} {tuple(shape)}')
        for n, (ms, spread) in times.items():
            ratio = ms / times['GELU'][0]
            saved = saved_ratio(fles if 'FleS' in n else F.gelu, x)
            table[f'{n} {name}'] = dict(
                ms=ms, spread=spread, ratio=ratio, saved_over_input=saved)
            print(f'{n:>26} {ms:10.3f} ms {spread:7.1%} {ratio:6.2f}x '
                  f'saved/input {saved:.2f}')
    results['fles'] = table


class Classifier(nn.Module):
    """ActResNet-50 + global average pooling + linear head."""

    def __init__(self, **backbone_cfg) -> None:
        super().__init__()
        from mmact.models.backbones import ActResNet
        self.backbone = ActResNet(50, **backbone_cfg)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.backbone(x)[-1].mean((2, 3)))


BACKBONES = {
    'SE-R50 ReLU':
    dict(
        act_cfg=dict(type='ReLU', inplace=True),
        attention_cfg=dict(type='SEAttention')),
    'APA*+AGLU SE-R50':
    dict(act_cfg=dict(type='AGLU'), attention_cfg=dict(type='APASELayer')),
}


def make_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
              amp: bool) -> Callable[[], None]:
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()

    return step


def step_peak(cfg: dict, images, labels, amp: bool) -> int:
    """max_memory_allocated over training steps of one model alone."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = Classifier(**cfg).cuda().train().to(
        memory_format=torch.channels_last)
    step = make_step(model, images, labels, amp)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del model, step
    return peak


def run_backbone(results: Dict, batch: int, steps: int,
                 torch_path: bool) -> None:
    torch.manual_seed(0)
    images = torch.randn(
        batch, 3, 224, 224,
        device='cuda').to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch, ), device='cuda')
    configs = dict(BACKBONES)
    table = {}
    for amp in (False, True):
        prec = 'bf16 autocast' if amp else 'float32'
        peaks = {
            n: step_peak(c, images, labels, amp)
            for n, c in configs.items()
        }
        models = {
            n: Classifier(**c).cuda().train().to(
                memory_format=torch.channels_last)
            for n, c in configs.items()
        }
        stepf = {
            n: make_step(m, images, labels, amp)
            for n, m in models.items()
        }
        if torch_path:
            stepf['APA*+AGLU SE-R50 (torch path)'] = _with_torch_path(
                stepf['APA*+AGLU SE-R50'])
        times: Dict[str, List[float]] = {n: [] for n in stepf}
        for _ in range(3):  # warm-up, compiles the kernels
            for f in stepf.values():
                f()
        block = 5
        for _ in range(max(steps // block, 1)):
            for n, f in stepf.items():
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(block):
                    f()
                end.record()
                end.synchronize()
                times[n].append(start.elapsed_time(end) / block)
        base = 'SE-R50 ReLU'
        print(f'\n== training step, batch {batch}x3x224x224, {prec}, '
              'channels_last, SGD')
        for n, t in times.items():
            med = statistics.median(t)
            ratio = med / statistics.median(times[base])
            peak = peaks.get(n)
            mem = (f', peak {peak / 2**30:.2f} GiB '
                   f'({peak / peaks[base]:.3f}x)' if peak else '')
            print(f'{n:>32}: {med:8.2f} ms/step ({ratio:.3f}x; '
                  f'min {min(t):.2f}, max {max(t):.2f}){mem}')
            table[f'{n} {prec}'] = dict(
                ms=med,
                ratio=ratio,
                peak_bytes=peak,
                peak_ratio=peak / peaks[base] if peak else None)
        del models, stepf
    results['backbone'] = table


def _with_torch_path(step: Callable[[], None]) -> Callable[[], None]:

    def run():
        with backends.using(triton='off'):
            step()

    return run


def main(argv: Optional[List[str]] = None) -> Dict:
    """Run the chosen parts; print tables; return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--parts',
        nargs='+',
        default=['ops', 'fles', 'backbone'],
        choices=['ops', 'fles', 'backbone'])
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument(
        '--no-torch-path',
        action='store_true',
        help='skip the MMACT_TRITON=0 step of the backbone')
    parser.add_argument('--json', help='write the figures to this file')
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit('benchmark_cuda.py needs a CUDA GPU')
    import triton
    props = torch.cuda.get_device_properties(0)
    header = dict(
        gpu=props.name,
        date=datetime.date.today().isoformat(),
        torch=torch.__version__,
        triton=triton.__version__,
        cuda=torch.version.cuda)
    print(' '.join(f'{k}={v}' for k, v in header.items()))
    results: Dict = dict(header=header)
    if 'ops' in args.parts:
        run_ops(results)
    if 'fles' in args.parts:
        run_fles(results)
    if 'backbone' in args.parts:
        run_backbone(results, args.batch, args.steps, not args.no_torch_path)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == '__main__':
    main()
