"""Long-tailed learning benchmark on real handwritten digits.

scikit-learn's bundled digits (1797 real 8x8 scans, no download) are split
into a balanced test set (``--test-per-class`` per class) and a long-tailed
training set: class ``i`` keeps ``floor(n_max * IF^(-i / 9))`` images
(``n_max = --max-per-class``, imbalance factor ``IF = --imbalance-factor``;
the defaults give 100, 59, 35, 21, 12, 7, 4, 2, 1, 1). A small CNN built
from mmcv ``ConvModule``\\ s with ``act_cfg`` and registry-built attention
layers -- the code path of a user's config -- is trained with each variant:

* ``relu-se``: ReLU + SE attention (sigmoid gate), the baseline
* ``aglu-apase``: AGLU + APA* attention (APA gate)
* ``fles``: FleS + SE
* ``arelu``: AReLU + SE
* ``iglu``: IGLU + SE

for every seed (weights and batch order; the data split is fixed), with SGD
through mmengine's ``build_optim_wrapper`` and
:func:`mmact.utils.activation_paramwise_cfg` (no weight decay on activation
parameters). Printed: mean +- std over seeds of the overall test accuracy
and of the many- (3 largest classes), medium- (next 4) and few-shot (3
smallest) accuracy.

Example::

    python tools/benchmarks/benchmark_long_tail.py --seeds 0 1 2
"""
import argparse
import json
import math
import time
from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmengine.logging import MMLogger
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS

import mmact  # noqa: F401  (registers the activations)
from mmact.datasets import long_tailed_counts
from mmact.models.utils import materialize_lazy_modules
from mmact.utils import activation_paramwise_cfg
from mmact.utils.refusal import refusing, run_tool

#: variant -> (act_cfg, attention_cfg)
VARIANTS = {
    'relu-se': (dict(type='ReLU'), dict(type='SEAttention')),
    'aglu-apase': (dict(type='AGLU'), dict(type='APASELayer')),
    'fles': (dict(type='FleS', reduction=4), dict(type='SEAttention')),
    'arelu': (dict(type='AReLU'), dict(type='SEAttention')),
    'iglu': (dict(type='IGLU'), dict(type='SEAttention')),
}
#: class ranks (0 = most frequent) of each shot group
SHOT_GROUPS = {'many': range(0, 3), 'medium': range(3, 7), 'few': range(7, 10)}


def digits_split(max_per_class: int, imbalance_factor: float,
                 test_per_class: int, split_seed: int = 0
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: long-tailed train, balanced
    test; images scaled to [0, 1], shape ``(N, 1, 8, 8)``."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None] / 16.0
    y = digits.target.astype(np.int64)
    counts = long_tailed_counts(10, max_per_class, imbalance_factor)
    rng = np.random.RandomState(split_seed)
    train, test = [], []
    for label, n_train in enumerate(counts):
        index = rng.permutation(np.flatnonzero(y == label))
        if len(index) < test_per_class + n_train:
            raise ValueError(
                f'digit {label} has {len(index)} images, fewer than '
                f'--test-per-class + its training share of '
                f'--max-per-class ({test_per_class} + {n_train})')
        test.append(index[:test_per_class])
        train.append(index[test_per_class:test_per_class + n_train])
    train, test = np.concatenate(train), np.concatenate(test)
    return x[train], y[train], x[test], y[test]


class DigitsNet(nn.Module):
    """conv-conv-attention-pool-conv-attention-GAP-linear, BN everywhere."""

    def __init__(self, act_cfg: dict, attention_cfg: dict,
                 widths: Tuple[int, int, int] = (16, 32, 64)) -> None:
        super().__init__()
        w1, w2, w3 = widths

        def conv(cin, cout):
            return ConvModule(cin, cout, 3, padding=1,
                              norm_cfg=dict(type='BN'), act_cfg=act_cfg)

        def attention(channels):
            return MODELS.build(dict(attention_cfg, in_channels=channels,
                                     ratio=4))

        self.features = nn.Sequential(
            conv(1, w1), conv(w1, w2), attention(w2), nn.MaxPool2d(2),
            conv(w2, w3), attention(w3))
        self.fc = nn.Linear(w3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


def shift_augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random translation by up to one pixel (zero padding)."""
    padded = F.pad(x, (1, 1, 1, 1))
    dy, dx = torch.randint(0, 3, (2, ), generator=generator).tolist()
    return padded[..., dy:dy + 8, dx:dx + 8]


def train_and_test(variant: str, seed: int, data, epochs: int,
                   batch_size: int, lr: float) -> Dict[str, float]:
    x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in data)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    act_cfg, attention_cfg = VARIANTS[variant]
    model = DigitsNet(act_cfg, attention_cfg)
    materialize_lazy_modules(model, x_train[:2])  # lazy FleS channels
    optim = build_optim_wrapper(
        model,
        dict(optimizer=dict(type='SGD', lr=lr, momentum=0.9,
                            weight_decay=5e-4),
             paramwise_cfg=activation_paramwise_cfg(model)))
    steps = epochs * math.ceil(len(x_train) / batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        optim.optimizer, max(steps, 1))
    start = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x_train), generator=generator)
        for i in range(0, len(order), batch_size):
            index = order[i:i + batch_size]
            loss = F.cross_entropy(
                model(shift_augment(x_train[index], generator)),
                y_train[index])
            if not torch.isfinite(loss):
                return dict(diverged=1.0)
            optim.update_params(loss)
            schedule.step()
    model.eval()
    with torch.no_grad():
        correct = (model(x_test).argmax(1) == y_test).float()
    # class labels are ranked by training count (label 0 most frequent)
    result = dict(overall=float(correct.mean()),
                  seconds=time.perf_counter() - start)
    for group, ranks in SHOT_GROUPS.items():
        mask = torch.isin(y_test, torch.tensor(list(ranks)))
        result[group] = float(correct[mask].mean())
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--variants', nargs='+', choices=list(VARIANTS),
                        default=list(VARIANTS))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--epochs', type=int, default=60)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--lr', type=float, default=0.05)
    parser.add_argument('--max-per-class', type=int, default=100)
    parser.add_argument('--imbalance-factor', type=float, default=100.0)
    parser.add_argument('--test-per-class', type=int, default=50)
    parser.add_argument('--threads', type=int, default=2,
                        help='torch CPU threads (default: 2)')
    parser.add_argument('--out', help='also write the results as JSON')
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # build_optim_wrapper logs every parameter group at INFO
    MMLogger.get_instance('benchmark_long_tail', log_level='WARNING')
    torch.set_num_threads(args.threads)
    with refusing(ValueError):
        data = digits_split(args.max_per_class, args.imbalance_factor,
                            args.test_per_class)
    counts = np.bincount(data[1], minlength=10).tolist()
    print(f'digits: train {len(data[1])} images, per class {counts} '
          f'(imbalance {counts[0] / counts[-1]:g}); balanced test '
          f'{len(data[3])} images; {args.epochs} epochs, seeds {args.seeds}')
    results = {}
    for variant in args.variants:
        runs = [
            train_and_test(variant, seed, data, args.epochs, args.batch_size,
                           args.lr) for seed in args.seeds
        ]
        results[variant] = runs
        print(f'  {variant}: ' + ', '.join(
            'diverged' if 'diverged' in r else
            f"{100 * r['overall']:.1f}% ({r['seconds']:.1f}s)" for r in runs))

    keys = ('overall', 'many', 'medium', 'few')
    print('\nTest accuracy (%), mean +- std over seeds')
    print(f"{'variant':<12}" + ''.join(f'{k:>16}' for k in keys)
          + f"{'diverged':>10}")
    for variant, runs in results.items():
        ok = [r for r in runs if 'diverged' not in r]
        cells = []
        for key in keys:
            values = 100 * np.array([r[key] for r in ok])
            cells.append(f'{values.mean():6.1f} +- {values.std():4.1f}'
                         if ok else 'n/a')
        print(f'{variant:<12}' + ''.join(f'{c:>16}' for c in cells)
              + f'{len(runs) - len(ok):>10}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(dict(args=vars(args), train_counts=counts,
                           results=results), f, indent=2)


if __name__ == '__main__':
    run_tool(main)
