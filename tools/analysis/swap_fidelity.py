"""How closely a model with swapped activations computes the original one.

CONFIG / CHECKPOINT are the *original* model (e.g. a ReLU ResNet-50). Its
activations of ``--target`` types are swapped for ``--act`` in copies that
differ in how the new parameters are set:

- ``random``: the activation's init ranges (what a swap did before);
- ``match@TOL``: fitted to the replaced activation, data-free from the BN
  statistics (``swap_activations(..., match=True, tolerance=TOL)``), one per
  ``--tolerance``;
- ``calibrated@TOL`` (``--calibrate``): fitted on the moments measured on the
  inputs instead;
- ``kappa=K`` (``--kappa``): fixed kappa, lambda = 1, one per value.

Prints, per swapped layer, the local relative L2 deviation (the new
activation on the input the original one received) and, at the output (the
logits of a classifier, the backbone's last feature map otherwise), the
relative L2 deviation, the mean cosine similarity and, for classifiers, the
top-1 agreement. Classifiers are swapped whole, other models in their
backbone. Writes ``swap_fidelity.json`` to ``--out-dir``.

Inputs come from the config's ``--split`` (``--inputs data``, default) or are
seeded noise images (``--inputs noise --shape 3 224 224``).
``--calibrate-bn`` first recomputes the original's BN running statistics on
the inputs (for random-weight models, whose statistics describe nothing).

Example (the toy LVIS Mask R-CNN's randomly initialised ResNet-50; generate
the data first with ``python tools/misc/generate_toy_data.py``)::

    python tools/analysis/swap_fidelity.py \\
        configs/toy/mask-rcnn_r50_fpn_toy-lvis.py --calibrate-bn \\
        --kappa 2 16 64 128 --tolerance 0.05 0.02 0.01 0.005
"""
import torch

import mmact  # noqa: F401
from mmact.analysis import (build_split_dataloader, format_table,
                            sample_batches, save_json)
from mmact.analysis.cli import analysis_parser, config_and_model, figure_path
from mmact.analysis.swap_fidelity import (calibrate_bn, compare_variants,
                                          swap_variants)
from mmact.models.utils.swap_fit import DEFAULT_TOLERANCE
from mmact.utils.refusal import INPUT_ERRORS, run_tool


def _inputs(args, cfg, model):
    if args.inputs == 'noise':
        generator = torch.Generator().manual_seed(0)
        batch = args.batch_size or 4
        batches = -(-args.num_samples // batch)
        return [
            torch.randn((batch, *args.shape), generator=generator).to(
                args.device) for _ in range(batches)
        ]
    loader = build_split_dataloader(cfg, args.split, args.batch_size)
    return [
        data['inputs']
        for data, _ in sample_batches(model, loader, args.num_samples)
    ]


def main() -> None:
    parser = analysis_parser(
        'Deviation of a model with swapped activations from the original',
        'work_dirs/swap_fidelity',
        num_samples=8)
    parser.add_argument(
        '--act', default='AGLU', help='new activation type (default: AGLU)')
    parser.add_argument(
        '--target',
        nargs='+',
        help='activation types to replace (default: Sigmoid for APA, ReLU '
        'otherwise)')
    parser.add_argument(
        '--tolerance',
        nargs='+',
        type=float,
        default=[DEFAULT_TOLERANCE],
        help='one matched variant per value (default: '
        f'{DEFAULT_TOLERANCE})')
    parser.add_argument(
        '--kappa', nargs='*', type=float, default=[],
        help='fixed-kappa variants (lambda = 1)')
    parser.add_argument(
        '--calibrate',
        action='store_true',
        help='add variants fitted on the inputs\' measured moments')
    parser.add_argument(
        '--calibrate-bn',
        action='store_true',
        help="recompute the original's BN statistics on the inputs first")
    parser.add_argument(
        '--no-untie',
        action='store_true',
        help="keep the stock ResNet blocks' shared relu shared")
    parser.add_argument('--inputs', choices=['data', 'noise'], default='data')
    parser.add_argument(
        '--shape',
        nargs=3,
        type=int,
        default=[3, 224, 224],
        help='C H W of --inputs noise (default: 3 224 224)')
    args = parser.parse_args()
    cfg, model = config_and_model(args)
    inputs = _inputs(args, cfg, model)

    classifier = hasattr(model, 'head') and not hasattr(model, 'roi_head')
    if classifier:
        scope = model

        def forward(module, x):
            return module(x, mode='tensor')
    else:
        scope = model.backbone if hasattr(model, 'backbone') else model

        def forward(module, x):
            return module(x)

    if args.calibrate_bn:
        calibrate_bn(scope, inputs, lambda x: forward(scope, x))
    targets = args.target or (['Sigmoid'] if args.act == 'APA' else ['ReLU'])
    variants = {'random': dict(kind='random')}
    for tol in args.tolerance:
        variants[f'match@{tol:g}'] = dict(kind='match', tolerance=tol)
        if args.calibrate:
            variants[f'calibrated@{tol:g}'] = dict(
                kind='match', tolerance=tol, calibration=True)
    for kappa in args.kappa:
        variants[f'kappa={kappa:g}'] = dict(kind='fixed', kappa=kappa)
    swapped = swap_variants(scope, dict(type=args.act), targets, variants,
                            inputs, forward, untie=not args.no_untie)
    report = compare_variants(scope, swapped, inputs, forward, classifier)

    names = list(variants)
    print(f'local relative L2 deviation per swapped layer ({args.act} for '
          f'{"/".join(targets)}):')
    print(
        format_table(['layer', *names],
                     [[layer] + [errs.get(n) for n in names]
                      for layer, errs in report['layers'].items()], 3))
    print('\nat the output (' + ('logits' if classifier else
                                 'last feature map') + '):')
    columns = ['rel_l2', 'cosine'] + (['top1_agreement'] if classifier else [])
    print(
        format_table(['variant', *columns, 'median kappa'], [[
            n, *[report['output'][n][c] for c in columns],
            float(
                torch.tensor([
                    p['kappa'] for p in report['params'][n].values()
                    if 'kappa' in p
                ] or [float('nan')]).median())
        ] for n in names], 4))
    path = save_json(report, figure_path(args, 'swap_fidelity.json'))
    print(f'\nwrote {path}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
