"""Plot every learned activation of a model (Alexandridis et al. 2025, Fig. 7,
8; FleS E.1).

Writes to ``--out-dir``:

* ``curves.png``: the curve of each APA / AGLU / AReLU / IGLU layer,
  coloured by depth (one panel per type);
* ``parameters.png``: kappa and lambda (AReLU: alpha, beta; IGLU: sigma) per
  layer in depth order, with the channel range for per-channel parameters;
* ``expected_output.png``: ``E[y]`` under ``N(0, 1)`` input per layer;
* for FleS layers, run on ``--num-samples`` samples of the config's dataset:
  ``fles_scales.png`` (distribution of ``k_ve`` and ``k_ho`` per layer) and
  ``fles_saturation.png`` (share of gate values ``rho(k_ho x) > 0.9``);
* ``activations.json`` with all numbers; the tables are also printed.

Example::

    python tools/analysis/plot_activations.py \\
        configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py \\
        work_dirs/apase-aglu-r50/epoch_100.pth --out-dir work_dirs/act_plots

Without a checkpoint the freshly initialised model is shown.
"""
from collections import defaultdict
from typing import Dict, List, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import mmact  # noqa: F401,E402
from mmact.analysis import (FleSRecorder, activation_curve,  # noqa: E402
                            activation_parameters, build_split_dataloader,
                            expected_output, find_modules, format_table,
                            sample_batches, save_figure, save_json)
from mmact.analysis.cli import (analysis_parser,  # noqa: E402
                                config_and_model, figure_path)
from mmact.models.activations import FleS  # noqa: E402
from mmact.utils.refusal import INPUT_ERRORS, Refused, run_tool  # noqa: E402

MAX_CURVES_PER_LAYER = 16
# Fixed (non-learned) shapes drawn for reference in each panel.
REFERENCES = {
    'APA': ('sigmoid', torch.sigmoid),
    'AGLU': ('ReLU', torch.relu),
    'AReLU': ('ReLU', torch.relu),
    'IGLU': ('ReLU', torch.relu),
    'IGLUApprox': ('ReLU', torch.relu),
}


def by_type(layers: List[Tuple[str, nn.Module]]) -> Dict[str, list]:
    groups = defaultdict(list)
    for name, module in layers:
        groups[type(module).__name__].append((name, module))
    return groups


def plot_curves(groups: Dict[str, list], path: str) -> None:
    z = torch.linspace(-4, 4, 401)
    fig, axes = plt.subplots(
        1,
        len(groups),
        figsize=(4.8 * len(groups), 3.6),
        squeeze=False,
        layout='constrained')
    for ax, (kind, layers) in zip(axes[0], groups.items()):
        cmap = plt.get_cmap('viridis')
        for depth, (_, module) in enumerate(layers):
            curves = activation_curve(module, z).float().cpu()
            color = cmap(depth / max(len(layers) - 1, 1))
            for curve in curves[:MAX_CURVES_PER_LAYER]:
                ax.plot(z, curve, color=color, lw=0.8,
                        alpha=0.9 if len(curves) == 1 else 0.4)
        if kind in REFERENCES:
            label, reference = REFERENCES[kind]
            ax.plot(z, reference(z), 'k--', lw=0.8, label=label)
            ax.legend(loc='upper left', fontsize=8)
        ax.set(title=f'{kind} ({len(layers)} layers)', xlabel='x',
               ylabel='f(x)')
        mappable = plt.cm.ScalarMappable(
            cmap=cmap, norm=plt.Normalize(0, max(len(layers) - 1, 1)))
        fig.colorbar(mappable, ax=ax, label='layer (depth order)')
    save_figure(fig, path)


def plot_per_layer(series: Dict[str, np.ndarray], path: str,
                   ylabel: str) -> None:
    """One panel per key: mean and channel range of per-layer values."""
    fig, axes = plt.subplots(
        1, len(series), figsize=(4.5 * len(series), 3.2), squeeze=False)
    for ax, (key, per_layer) in zip(axes[0], series.items()):
        depth = np.arange(len(per_layer))
        mean = np.array([v.mean() for v in per_layer])
        ax.plot(depth, mean, 'o-', ms=3)
        if any(v.size > 1 for v in per_layer):
            ax.fill_between(depth, [v.min() for v in per_layer],
                            [v.max() for v in per_layer], alpha=0.25,
                            label='channel range')
            ax.legend(fontsize=8)
        ax.set(title=key, xlabel='layer (depth order)', ylabel=ylabel)
    save_figure(fig, path)


def fles_statistics(args, cfg, model, out: dict) -> None:
    loader = build_split_dataloader(cfg, args.split, args.batch_size)
    with FleSRecorder(model) as recorder, torch.no_grad():
        for data, _ in sample_batches(model, loader, args.num_samples):
            model(**data, mode='tensor')
    summary = recorder.summary()
    k_ve, k_ho = recorder.values('k_ve'), recorder.values('k_ho')
    names = list(summary)
    rows = [[name] + list(summary[name].values()) for name in names]
    print('\nFleS scales on', args.num_samples, f'{args.split} samples')
    print(format_table(['layer'] + list(next(iter(summary.values()))), rows))
    out['fles'] = summary

    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.5 * len(names)), 6))
    for ax, (key, values) in zip(axes, (('k_ve', k_ve), ('k_ho', k_ho))):
        ax.boxplot([values[n] for n in names], showfliers=False)
        ax.set(ylabel=key, xlabel='FleS layer (depth order)')
    axes[0].set_title('FleS scales (boxes: quartiles, whiskers: 1.5 IQR)')
    save_figure(fig, figure_path(args, 'fles_scales.png'))

    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(names)), 3))
    ax.bar(range(len(names)), [summary[n]['saturation'] for n in names])
    ax.set(xlabel='FleS layer (depth order)',
           ylabel='share of rho(k_ho x) > 0.9',
           title='FleS positive-side saturation')
    save_figure(fig, figure_path(args, 'fles_saturation.png'))


def main() -> None:
    parser = analysis_parser(
        'Plot the learned activations of a model', 'work_dirs/act_plots',
        num_samples=8)
    args = parser.parse_args()
    cfg, model = config_and_model(args)
    pointwise = find_modules(model, pointwise=True)
    fles = find_modules(model, (FleS, ))
    if not pointwise and not fles:
        raise Refused(
            f'{args.config}: the model has no learned activation (APA, AGLU, '
            'AReLU, IGLU, FleS, ...)')

    out = {'layers': []}
    rows = []
    params = defaultdict(list)
    expectations = defaultdict(list)
    for name, module in pointwise:
        kind = type(module).__name__
        values = activation_parameters(module)
        expectation = expected_output(module)
        for key, v in values.items():
            params[f'{kind}.{key}'].append(v)
        expectations[kind].append(expectation)
        out['layers'].append(
            dict(name=name, type=kind, expected_output=expectation.tolist(),
                 **{k: v.tolist() for k, v in values.items()}))
        rows.append([
            name, kind, ', '.join(f'{k}={v.mean():.4g}'
                                  for k, v in values.items()),
            float(expectation.mean())
        ])
    if pointwise:
        print(format_table(['layer', 'type', 'parameters (channel mean)',
                            'E[y], y=f(N(0,1))'], rows))
        groups = by_type(pointwise)
        plot_curves(groups, figure_path(args, 'curves.png'))
        plot_per_layer(params, figure_path(args, 'parameters.png'), 'value')
        plot_per_layer(expectations, figure_path(args, 'expected_output.png'),
                       'E[f(x)], x ~ N(0, 1)')
    if fles:
        fles_statistics(args, cfg, model, out)
    save_json(out, figure_path(args, 'activations.json'))
    print(f'\nFigures and activations.json written to {args.out_dir}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
