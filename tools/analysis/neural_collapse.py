"""NC1 neural-collapse measure of a classifier's penultimate features
(Alexandridis et al., Adaptive Parametric Activation, 2024, App., Eq. 10-12,
Table XIV).

Runs ``--num-samples`` images of the config's ``--split`` through the model,
collects the features that enter its classifier layer (mmpretrain's
``extract_feat(stage='pre_logits')``) with the images' labels, and reports

    NC1 = (1/K) trace(S_W S_B^+)

S_W: within-class covariance, S_B: covariance of the class means around the
global mean, K: classes with samples. Lower means more compact, better
separated classes; the paper measures SE vs APA* backbones on the ImageNet-LT
test split (e.g. ResNet-50: 3.04 vs 2.71). Features are accumulated batch by
batch, so the whole test set can be used.

Writes ``neural_collapse.json`` to ``--out-dir`` and prints the result.

Example::

    CFG=configs/imagenet/apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py
    python tools/analysis/neural_collapse.py $CFG \\
        work_dirs/$(basename $CFG .py)/epoch_200.pth --split test
"""
import numpy as np

import mmact  # noqa: F401
from mmact.analysis import (build_split_dataloader, format_table,
                            sample_batches, save_json)
from mmact.analysis.classifier_outputs import (check_classifier,
                                               penultimate_features)
from mmact.analysis.cli import analysis_parser, config_and_model, figure_path
from mmact.analysis.neural_collapse import NC1Accumulator
from mmact.utils.refusal import INPUT_ERRORS, run_tool


def main() -> None:
    parser = analysis_parser(
        'NC1 neural-collapse measure of the penultimate features',
        'work_dirs/neural_collapse',
        num_samples=50000)
    args = parser.parse_args()
    cfg, model = config_and_model(args)
    check_classifier(model, 'neural_collapse.py')
    loader = build_split_dataloader(cfg, args.split, args.batch_size)

    accumulator = NC1Accumulator()
    for data, labels in sample_batches(model, loader, args.num_samples):
        accumulator.update(
            penultimate_features(model, data), np.concatenate(labels))
    result = accumulator.compute()

    print(f"{result['num_samples']} samples ({args.split}) of "
          f"{result['num_classes']} classes, {result['feature_dim']}-d "
          'penultimate features')
    print(
        format_table(['NC1', 'trace S_W', 'trace S_B', 'rank S_B'], [[
            result['nc1'], result['trace_within'], result['trace_between'],
            result['rank_between']
        ]]))
    save_json(
        dict(result, split=args.split),
        figure_path(args, 'neural_collapse.json'))
    print(f'neural_collapse.json written to {args.out_dir}')


if __name__ == '__main__':
    run_tool(main, refuse=INPUT_ERRORS)
