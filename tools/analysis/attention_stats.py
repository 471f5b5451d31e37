"""Channel-attention entropy and variance per layer (Alexandridis et al. 2025,
Sec. III-B).

Runs ``--num-samples`` samples of the config's dataset through an SE or
APA* model and reports, for every attention layer in depth order:

* the entropy ``E_l`` of Eq. 4 in bits (mean binary entropy of the channel
  weights, averaged over samples; 0 = all-pass, 1 = maximally informative);
* the variance over channels of the sample-averaged attention (Fig. 3-c).

When the classes have frequency groups -- LVIS ``frequency`` (frequent /
common / rare) or training-set counts (many > ``--many-threshold`` >=
medium >= ``--few-threshold`` > few) -- both are also given per group, a
sample belonging to the rarest group among its labels. Writes
``attention_stats.png`` and ``attention_stats.json`` to ``--out-dir`` and
prints the table.

Example::

    python tools/analysis/attention_stats.py \\
        configs/imagenet/apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py \\
        work_dirs/in1k-lt/epoch_200.pth --num-samples 256
"""
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import mmact  # noqa: F401,E402
from mmact.analysis import (AttentionRecorder,  # noqa: E402
                            attention_channel_variance, attention_entropy,
                            build_split_dataloader, class_groups,
                            format_table, sample_batches, sample_group,
                            save_figure, save_json)
from mmact.analysis.cli import (analysis_parser,  # noqa: E402
                                config_and_model, figure_path)
from mmact.utils.refusal import INPUT_ERRORS, run_tool  # noqa: E402


def main() -> None:
    parser = analysis_parser('Channel-attention entropy and variance',
                             'work_dirs/attention_stats')
    parser.add_argument('--many-threshold', type=int, default=100)
    parser.add_argument('--few-threshold', type=int, default=20)
    args = parser.parse_args()
    cfg, model = config_and_model(args)
    recorder = AttentionRecorder(model)
    loader = build_split_dataloader(cfg, args.split, args.batch_size)
    groups, order = class_groups(cfg, loader.dataset, args.many_threshold,
                                 args.few_threshold)

    sample_groups = []
    with recorder, torch.no_grad():
        for data, labels in sample_batches(model, loader, args.num_samples):
            model(**data, mode='tensor')
            sample_groups += [
                sample_group(lab, groups, order) if groups else None
                for lab in labels
            ]
    weights = recorder.weights()
    sample_groups = np.array(sample_groups, dtype=object)
    present = [g for g in order if (sample_groups == g).any()]

    headers = ['layer', 'channels', 'entropy', 'variance']
    for g in present:
        headers += [f'entropy[{g}]', f'variance[{g}]']
    rows, result = [], {'num_samples': len(sample_groups), 'layers': []}
    for name, a in weights.items():
        entry = dict(name=name, channels=a.shape[1],
                     entropy=float(attention_entropy(a).mean()),
                     variance=attention_channel_variance(a))
        row = [name, a.shape[1], entry['entropy'], entry['variance']]
        for g in present:
            part = a[sample_groups == g]
            entry[f'entropy_{g}'] = float(attention_entropy(part).mean())
            entry[f'variance_{g}'] = attention_channel_variance(part)
            row += [entry[f'entropy_{g}'], entry[f'variance_{g}']]
        rows.append(row)
        result['layers'].append(entry)
    counts = {g: int((sample_groups == g).sum()) for g in present}
    result['samples_per_group'] = counts
    print(f'Channel attention on {len(sample_groups)} {args.split} samples'
          + (f' ({", ".join(f"{g}: {n}" for g, n in counts.items())})'
             if counts else ''))
    print('entropy: Eq. 4 in bits (log2), mean over samples; variance: over '
          'channels of the mean attention')
    print(format_table(headers, rows))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    depth = np.arange(len(rows))
    for ax, key in zip(axes, ('entropy', 'variance')):
        ax.plot(depth, [e[key] for e in result['layers']], 'k.-', label='all')
        for g in present:
            ax.plot(depth, [e[f'{key}_{g}'] for e in result['layers']], 'o-',
                    ms=3, label=g)
        ax.set(xlabel='attention layer (depth order)', ylabel=key,
               title=f'channel attention {key}')
        ax.legend(fontsize=8)
    axes[0].set_ylim(0, 1)
    save_figure(fig, figure_path(args, 'attention_stats.png'))
    save_json(result, figure_path(args, 'attention_stats.json'))
    print(f'\nattention_stats.png and .json written to {args.out_dir}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
