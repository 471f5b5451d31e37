"""Per-class logit distributions vs Gumbel and Logistic (Alexandridis et al.
2025, Fig. 2).

For every class ``c`` it collects the logit ``z_c`` over ``--num-samples``
samples of the config's dataset (a classifier: one logit per image; a
detector: one per RoI of the last RoI-head stage, or per anchor for
single-stage heads), fits a Gumbel (max) and a Logistic distribution by the
method of moments and reports the Kolmogorov-Smirnov distance to each. The
paper finds long-tailed training gives skewed logits closer to the Gumbel,
balanced training logits closer to the Logistic.

Writes ``logit_ks.png`` (KS to Gumbel vs KS to Logistic per class, like
Fig. 2-d/h), ``logit_histograms.png`` (histograms of ``--classes`` with both
fitted densities) and ``logit_distribution.json`` to ``--out-dir``, and
prints the table.

Example::

    python tools/analysis/logit_distribution.py \\
        configs/imagenet/se-relu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py \\
        work_dirs/se-r50-lt/epoch_200.pth --num-samples 1000 --classes 0 999
"""
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import mmact  # noqa: F401,E402
from mmact.analysis import (build_split_dataloader,  # noqa: E402
                            class_groups, fit_gumbel, fit_logistic,
                            format_table, forward_logits, sample_batches,
                            save_figure, save_json, ks_to_gumbel_and_logistic)
from mmact.analysis.cli import (analysis_parser,  # noqa: E402
                                config_and_model, figure_path)
from mmact.analysis.statistics import gumbel_pdf, logistic_pdf  # noqa: E402
from mmact.utils.refusal import INPUT_ERRORS, Refused, run_tool  # noqa: E402


def plot_histograms(logits, classes, names, path) -> None:
    fig, axes = plt.subplots(
        1, len(classes), figsize=(4.2 * len(classes), 3.2), squeeze=False)
    for ax, c in zip(axes[0], classes):
        x = logits[:, c]
        ax.hist(x, bins=40, density=True, alpha=0.5, color='gray')
        grid = np.linspace(x.min(), x.max(), 200)
        ax.plot(grid, gumbel_pdf(grid, *fit_gumbel(x)), label='Gumbel')
        ax.plot(grid, logistic_pdf(grid, *fit_logistic(x)), label='Logistic')
        ax.set(title=f'class {c}: {names[c]}', xlabel='logit')
        ax.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    parser = analysis_parser('Logit distributions vs Gumbel / Logistic',
                             'work_dirs/logit_distribution')
    parser.add_argument(
        '--classes',
        type=int,
        nargs='+',
        help='classes to draw histograms of (default: the most and the '
        'rarest class by frequency group, or the first two)')
    parser.add_argument('--many-threshold', type=int, default=100)
    parser.add_argument('--few-threshold', type=int, default=20)
    args = parser.parse_args()
    cfg, model = config_and_model(args)
    loader = build_split_dataloader(cfg, args.split, args.batch_size)
    names = list(loader.dataset.metainfo['classes'])
    logits = np.concatenate([
        forward_logits(model, data)
        for data, _ in sample_batches(model, loader, args.num_samples)
    ])
    if logits.shape[0] < 2:
        raise Refused('need at least 2 logit rows; raise --num-samples')
    num_classes = logits.shape[1]
    for c in args.classes or ():
        if not 0 <= c < num_classes:
            raise Refused(f'--classes: {c} is not in [0, {num_classes})')
    groups, order = class_groups(cfg, loader.dataset, args.many_threshold,
                             args.few_threshold)

    rows, per_class = [], []
    for c in range(num_classes):
        ks = ks_to_gumbel_and_logistic(logits[:, c])
        closer = 'gumbel' if ks['gumbel'] < ks['logistic'] else 'logistic'
        entry = dict(label=c, name=names[c],
                     group=groups[c] if groups else None,
                     mean_logit=float(logits[:, c].mean()),
                     ks_gumbel=ks['gumbel'], ks_logistic=ks['logistic'],
                     closer=closer)
        per_class.append(entry)
        rows.append(list(entry.values()))
    gumbel_share = float(np.mean([e['closer'] == 'gumbel'
                                  for e in per_class]))
    print(f'{logits.shape[0]} logit rows ({args.split}, {args.num_samples} '
          'samples); KS = sup|F_empirical - F_fitted|, fits by moments')
    print(format_table(['label', 'class', 'group', 'mean logit', 'KS Gumbel',
                        'KS Logistic', 'closer'], rows))
    print(f'\nclasses closer to the Gumbel: {100 * gumbel_share:.1f}%')

    if args.classes:
        chosen = args.classes
    elif groups:
        by_rarity = sorted(range(num_classes),
                           key=lambda c: order.index(groups[c]))
        chosen = sorted({by_rarity[0], by_rarity[-1]})
    else:
        chosen = list(range(min(2, num_classes)))
    plot_histograms(logits, chosen, names,
                    figure_path(args, 'logit_histograms.png'))
    fig, ax = plt.subplots(figsize=(4.2, 4))
    ks_g = [e['ks_gumbel'] for e in per_class]
    ks_l = [e['ks_logistic'] for e in per_class]
    ax.scatter(ks_l, ks_g, s=8)
    top = max(ks_g + ks_l) * 1.05
    ax.plot([0, top], [0, top], 'k--', lw=0.8)
    ax.set(xlabel='KS distance to Logistic', ylabel='KS distance to Gumbel',
           title=f'{100 * gumbel_share:.0f}% of classes below the diagonal')
    save_figure(fig, figure_path(args, 'logit_ks.png'))
    save_json(dict(rows=logits.shape[0], gumbel_share=gumbel_share,
                   classes=per_class),
              figure_path(args, 'logit_distribution.json'))
    print(f'Figures and logit_distribution.json written to {args.out_dir}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
