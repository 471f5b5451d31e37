"""Expected calibration error and reliability diagram of a classifier
(Alexandridis et al., Adaptive Parametric Activation, 2024, App. G, Fig. 10).

Runs ``--num-samples`` images of the config's ``--split`` through the model,
takes the top-1 class and its predicted probability (the head's
``pred_score``, PC-Softmax compensation included for the PC-Softmax heads),
bins the confidences into ``--num-bins`` equal-width bins and reports

    ECE = sum_b (n_b / n) |accuracy_b - confidence_b|

with the maximum bin gap (MCE). A mean confidence below the accuracy means
the model is under-confident (the paper's SE-ResNet-50 on ImageNet-LT),
above it over-confident.

Writes ``reliability.png`` (per-bin accuracy against the diagonal, the gap
shaded, and the number of samples per bin) and ``calibration.json`` to
``--out-dir`` and prints the bins.

Example (the paper evaluates on the ImageNet-LT test split)::

    CFG=configs/imagenet/apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py
    python tools/analysis/calibration.py $CFG \\
        work_dirs/$(basename $CFG .py)/epoch_200.pth --split test
"""
import os.path as osp

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import mmact  # noqa: F401,E402
from mmact.analysis import (
    build_split_dataloader,
    format_table,  # noqa
    sample_batches,
    save_figure,
    save_json)
from mmact.analysis.calibration import calibration_bins  # noqa: E402
from mmact.analysis.classifier_outputs import (
    check_classifier,  # noqa
    predicted_scores)
from mmact.analysis.cli import (
    analysis_parser,
    config_and_model,  # noqa
    figure_path)
from mmact.utils.refusal import INPUT_ERRORS, Refused, run_tool  # noqa: E402


def plot_reliability(bins: dict, title: str, path: str) -> None:
    """Reliability diagram over a confidence histogram."""
    edges, counts = bins['edges'], bins['counts']
    width = edges[1] - edges[0]
    centres = edges[:-1] + width / 2
    filled = counts > 0
    acc = np.where(filled, bins['accuracy'], 0.0)
    conf = np.where(filled, bins['confidence'], 0.0)
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(4.5, 5.6),
        gridspec_kw=dict(height_ratios=[4, 1]))
    top.bar(
        centres,
        acc,
        width=width,
        edgecolor='black',
        color='tab:blue',
        alpha=0.8,
        label='accuracy')
    top.bar(
        centres[filled], (conf - acc)[filled],
        bottom=acc[filled],
        width=width,
        color='tab:red',
        alpha=0.3,
        hatch='//',
        edgecolor='tab:red',
        label='gap to confidence')
    top.plot([0, 1], [0, 1], 'k--', lw=0.8)
    top.set(
        xlim=(0, 1),
        ylim=(0, 1),
        ylabel='accuracy',
        title=f"{title}\nECE {100 * bins['ece']:.2f}%")
    top.legend(loc='upper left', fontsize=8)
    bottom.bar(centres, counts, width=width * 0.9, color='gray')
    bottom.axvline(
        bins['accuracy_mean'], color='black', lw=1.5, label='accuracy')
    bottom.axvline(
        bins['confidence_mean'],
        color='black',
        ls=':',
        lw=1.5,
        label='mean confidence')
    bottom.set(xlabel='confidence (top-1 probability)', ylabel='samples')
    bottom.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = analysis_parser(
        'Expected calibration error and reliability diagram',
        'work_dirs/calibration',
        num_samples=50000)
    parser.add_argument(
        '--num-bins',
        type=int,
        default=10,
        help='equal-width confidence bins (default: 10)')
    parser.add_argument(
        '--title', help='figure title (default: the config name)')
    args = parser.parse_args()
    if args.num_bins < 1:
        raise Refused(f'--num-bins must be >= 1, got {args.num_bins}')
    cfg, model = config_and_model(args)
    check_classifier(model, 'calibration.py')
    loader = build_split_dataloader(cfg, args.split, args.batch_size)

    confidences, correct = [], []
    for data, labels in sample_batches(model, loader, args.num_samples):
        scores = predicted_scores(model, data)
        confidences.append(scores.max(axis=1))
        correct.append(scores.argmax(axis=1) == np.concatenate(labels))
    bins = calibration_bins(
        np.concatenate(confidences), np.concatenate(correct), args.num_bins)

    rows = [[f'({lo:.2f}, {hi:.2f}]',
             int(n), acc, conf] for lo, hi, n, acc, conf in zip(
                 bins['edges'][:-1], bins['edges'][1:], bins['counts'],
                 bins['accuracy'], bins['confidence']) if n > 0]
    print(f"{bins['n']} samples ({args.split}), {args.num_bins} bins")
    print(
        format_table(['bin', 'samples', 'accuracy', 'mean confidence'], rows))
    gap = bins['confidence_mean'] - bins['accuracy_mean']
    kind = ('over-confident' if gap > 0 else
            'under-confident' if gap < 0 else 'confidence = accuracy')
    print(f"\nECE {100 * bins['ece']:.2f}%  MCE {100 * bins['mce']:.2f}%  "
          f"accuracy {100 * bins['accuracy_mean']:.2f}%  mean confidence "
          f"{100 * bins['confidence_mean']:.2f}% ({kind})")

    title = args.title or osp.splitext(osp.basename(args.config))[0]
    plot_reliability(bins, title, figure_path(args, 'reliability.png'))
    report = {
        key: (np.where(np.isnan(v), None, v).tolist() if isinstance(
            v, np.ndarray) else v)
        for key, v in bins.items()
    }
    save_json(
        dict(report, split=args.split, num_bins=args.num_bins),
        figure_path(args, 'calibration.json'))
    print(f'reliability.png and calibration.json written to {args.out_dir}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
