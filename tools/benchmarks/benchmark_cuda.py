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

4. ``kernel``: GPU time alone (torch.profiler's device time of every kernel
   a call launches, no host time) of AGLU forward+backward against SiLU's,
   float32 and bfloat16.

``--device cpu --smoke`` runs every part on the CPU at toy sizes
(``tools/gpu/gpu_check.sh``'s dry run): the wall clock stands in for CUDA
events and ``do_bench``, the profiler's CPU time for kernel time, and no
memory figure is taken (null).

Operator times are medians of ``triton.testing.do_bench`` (CUDA events),
taken twice in alternating order; the spread between the two rounds is
printed. Gradients are taken with ``torch.autograd.grad`` (no accumulation
pass). Step times are medians over steps that alternate between the models
in blocks; peak memory is measured for each model alone.

Usage::

    python tools/benchmarks/benchmark_cuda.py [--parts ops fles backbone]
        [--batch 64] [--steps 20] [--json results.json]
        [--device cpu --smoke]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_utils  # noqa: E402

from mmact.ops import aglu, apa, backends  # noqa: E402

OP_SHAPE = (32, 256, 56, 56)  # 103 MB in float32: twice the H100's L2
FLES_SHAPE = (32, 256, 64, 64)
IMAGE_SIZE = 224
#: The dry run's sizes (``--smoke``).
SMOKE_OP_SHAPE = (2, 8, 8, 8)
SMOKE_FLES_SHAPE = (2, 32, 16, 16)
SMOKE_IMAGE_SIZE = 32
#: Where the parts run (``--device``).
DEVICE = 'cuda'


def bench(fn: Callable[[], object]) -> float:
    """Median milliseconds of ``fn`` (CUDA events, warm-up excluded; on
    the CPU the wall clock of a few calls)."""
    if torch.device(DEVICE).type != 'cuda':
        fn()
        times = []
        for _ in range(3):
            with bench_utils.StepClock(DEVICE) as clock:
                fn()
            times.append(clock.device_s * 1e3)
        return statistics.median(times)
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
    dev = DEVICE

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
        x = torch.randn(OP_SHAPE, device=DEVICE, dtype=dtype) * 3
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
        summary = results.setdefault('summary', {})
        wall = summary.setdefault('wall', {})
        wall[f'aglu_silu_{name}'] = table['AGLU']['ratio']
        if dtype == torch.float32:
            wall['apa_sigmoid_float32'] = table['APA']['ratio']
            summary.setdefault(
                'saved',
                {})['aglu_float32'] = table['AGLU']['saved_over_input']
        del x, go


def run_fles(results: Dict) -> None:
    from mmact.models.activations.fles import FleS
    shape = FLES_SHAPE
    table = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device=DEVICE, dtype=dtype)
        x.requires_grad_()
        go = torch.randn_like(x)
        fles = FleS(channels=shape[1], window_size=(9, 15)).to(DEVICE)
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
        summary = results.setdefault('summary', {})
        summary.setdefault(
            'wall',
            {})[f'fles_gelu_{name}'] = table[f'FleS 9x15 {name}']['ratio']
        summary.setdefault(
            'saved', {}
        )[f'fles_{name}'] = table[f'FleS 9x15 {name}']['saved_over_input']
    results['fles'] = table


def _kernel_us(run: Callable[[], None], calls: int) -> float:
    """Device time per call of every kernel ``run`` launches, from
    torch.profiler (the CPU time of the ops on the CPU)."""
    from torch.profiler import ProfilerActivity, profile
    cuda = torch.device(DEVICE).type == 'cuda'
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
    run()  # compile / warm up outside the profile
    with profile(activities=activities) as prof:
        for _ in range(calls):
            run()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        # the kernels themselves (device-side events); the aten ops' own
        # device times would count each kernel a second time
        total = sum(e.time_range.elapsed_us() for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA)
    else:
        total = sum(e.self_cpu_time_total for e in prof.key_averages())
    return total / calls


def run_kernel(results: Dict, calls: int = 20) -> None:
    """GPU time alone of AGLU (shared parameters) forward+backward against
    SiLU's."""
    table = {}
    summary = results.setdefault('summary', {}).setdefault('kernel', {})
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(OP_SHAPE, device=DEVICE, dtype=dtype) * 3
        x.requires_grad_()
        go = torch.randn_like(x)
        cases = op_cases(dtype)
        us = {
            n: _kernel_us(fwd_bwd(cases[n][0], x, go, cases[n][1]), calls)
            for n in ('SiLU', 'AGLU')
        }
        name = str(dtype).replace('torch.', '')
        ratio = us['AGLU'] / us['SiLU'] if us['SiLU'] else None
        table[name] = dict(aglu_us=us['AGLU'], silu_us=us['SiLU'], ratio=ratio)
        summary[f'aglu_silu_{name}'] = ratio
        print(f'\n== kernel time per fwd+bwd {name} {tuple(OP_SHAPE)}: AGLU '
              f'{us["AGLU"]:.1f} us, SiLU {us["SiLU"]:.1f} us '
              f'({"-" if ratio is None else f"{ratio:.2f}x"})')
        del x, go
    results['kernel'] = table


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
        with torch.autocast(
                torch.device(DEVICE).type, torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()

    return step


def step_peak(cfg: dict, images, labels, amp: bool) -> int:
    """max_memory_allocated over training steps of one model alone (None
    on the CPU, where no model is built for it)."""
    if torch.device(DEVICE).type != 'cuda':
        return None
    bench_utils.reset_peak_memory(DEVICE)
    model = Classifier(**cfg).to(DEVICE).train().to(
        memory_format=torch.channels_last)
    step = make_step(model, images, labels, amp)
    for _ in range(3):
        step()
    peak = bench_utils.peak_memory(DEVICE)
    del model, step
    return peak


def run_backbone(results: Dict, batch: int, steps: int,
                 torch_path: bool) -> None:
    torch.manual_seed(0)
    images = torch.randn(
        batch, 3, IMAGE_SIZE, IMAGE_SIZE,
        device=DEVICE).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch, ), device=DEVICE)
    configs = dict(BACKBONES)
    table = {}
    for amp in (False, True):
        prec = 'bf16 autocast' if amp else 'float32'
        peaks = {
            n: step_peak(c, images, labels, amp)
            for n, c in configs.items()
        }
        models = {
            n:
            Classifier(**c).to(DEVICE).train().to(
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
        for _ in range(3 if steps >= 5 else 1):  # warm-up, compiles kernels
            for f in stepf.values():
                f()
        block = min(5, steps)
        for _ in range(max(steps // block, 1)):
            for n, f in stepf.items():
                with bench_utils.StepClock(DEVICE) as clock:
                    for _ in range(block):
                        f()
                times[n].append(clock.device_s * 1e3 / block)
        base = 'SE-R50 ReLU'
        print(f'\n== training step, batch {batch}x3x{IMAGE_SIZE}x'
              f'{IMAGE_SIZE}, {prec}, '
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
        key = 'bfloat16' if amp else 'float32'
        step = results.setdefault('summary', {}).setdefault('step', {})
        step[f'se_r50_{key}'] = table[f'APA*+AGLU SE-R50 {prec}']['ratio']
        step[f'memory_{key}'] = table[f'APA*+AGLU SE-R50 {prec}']['peak_ratio']
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
        choices=['ops', 'fles', 'backbone', 'kernel'])
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument(
        '--no-torch-path',
        action='store_true',
        help='skip the MMACT_TRITON=0 step of the backbone')
    parser.add_argument('--json', help='write the figures to this file')
    parser.add_argument(
        '--device',
        default='cuda',
        help='cuda, or cpu for a dry run (with --smoke)')
    parser.add_argument(
        '--smoke',
        action='store_true',
        help=f'toy sizes: ops {SMOKE_OP_SHAPE}, FleS {SMOKE_FLES_SHAPE}, '
        f'images {SMOKE_IMAGE_SIZE}x{SMOKE_IMAGE_SIZE}, 2 steps')
    args = parser.parse_args(argv)
    global DEVICE, OP_SHAPE, FLES_SHAPE, IMAGE_SIZE
    DEVICE = args.device
    if torch.device(DEVICE).type == 'cuda' and not torch.cuda.is_available():
        from mmact.utils.refusal import Refused
        raise Refused('benchmark_cuda.py: --device cuda needs a CUDA GPU '
                      '(use --device cpu --smoke for a dry run)')
    if args.smoke:
        OP_SHAPE, FLES_SHAPE = SMOKE_OP_SHAPE, SMOKE_FLES_SHAPE
        IMAGE_SIZE, args.steps = SMOKE_IMAGE_SIZE, 2
        args.no_torch_path = True
        args.batch = min(args.batch, 2)
    from mmact.compat import triton_version
    header = dict(
        gpu=(torch.cuda.get_device_properties(0).name
             if torch.device(DEVICE).type == 'cuda' else 'cpu'),
        date=datetime.date.today().isoformat(),
        torch=torch.__version__,
        triton='.'.join(map(str, triton_version())) or None,
        cuda=torch.version.cuda)
    print(' '.join(f'{k}={v}' for k, v in header.items()))
    results: Dict = dict(header=header)
    if 'ops' in args.parts:
        run_ops(results)
    if 'fles' in args.parts:
        run_fles(results)
    if 'backbone' in args.parts:
        run_backbone(results, args.batch, args.steps, not args.no_torch_path)
    if 'kernel' in args.parts:
        run_kernel(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == '__main__':
    from mmact.utils.refusal import run_tool
    run_tool(main)
