"""tools/analysis/{plot_activations,attention_stats,logit_distribution}.py as
a user runs them, on generated data and shipped configs adapted to it."""
import json
import math
import os
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from mmact.testing import adapt_config
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[2]
APASE_LT = REPO / ('configs/imagenet/'
                   'apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py')
APASE_LVIS = REPO / ('configs/lvis/'
                     'mask-rcnn_apase-aglu-r50_fpn_gol-normmask_8xb2-rfs-'
                     'ms-2x_lvis-v1.py')
FLES_CLS = REPO / 'projects/fles/configs/poolformer-s12_fles_8xb128_in1k.py'
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def run_tool(name, *args, check=True):
    result = run_python([REPO / 'tools/analysis' / name, *args],
                        timeout=900,
                        env=dict(os.environ, PYTHONWARNINGS='ignore'))
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_png(path: Path):
    assert path.is_file(), path
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 2000, path


def save_checkpoint(config, path, edit=None):
    """Build ``config``'s model, optionally edit it, save a checkpoint."""
    from mmact.analysis import load_model
    model = load_model(Config.fromfile(str(config)))
    if edit is not None:
        with torch.no_grad():
            edit(model)
    torch.save(dict(state_dict=model.state_dict(), meta={}), path)
    return model


@pytest.fixture(scope='module')
def cls_configs(tmp_path_factory, toy_data_root):
    """APA* + AGLU ResNet-50 and FleS PoolFormer on a toy long-tailed set
    (training counts 8, 5, 3, 2, 1 for the 5 classes)."""
    base = tmp_path_factory.mktemp('analysis_cls')
    root = toy_data_root('cls', num_classes=5, imbalance=8, max_per_class=8,
                         num_val_per_class=2, image_size=(64, 64))
    paths = {}
    for key, config in (('apase', APASE_LT), ('fles', FLES_CLS)):
        cfg = adapt_config(Config.fromfile(str(config)), root, 5,
                           work_dir=str(base / key), batch_size=2)
        paths[key] = base / f'{key}.py'
        cfg.dump(str(paths[key]))
    return base, paths


def test_plot_activations_initial_state(cls_configs, tmp_path):
    _, paths = cls_configs
    out = tmp_path / 'plots'
    result = run_tool('plot_activations.py', paths['apase'], '--out-dir', out)
    for name in ('curves.png', 'parameters.png', 'expected_output.png'):
        assert_png(out / name)
    assert 'E[y], y=f(N(0,1))' in result.stdout
    layers = json.loads((out / 'activations.json').read_text())['layers']
    types = [layer['type'] for layer in layers]
    # ResNet-50: 16 bottlenecks x 3 AGLU + stem AGLU; 16 APA gates
    assert types.count('AGLU') == 49 and types.count('APA') == 16
    # the authors' classification code's init (configs/README.md): AGLU
    # kappa ~ U(0.8, 1.2), APA gate kappa ~ U(-1, 0)
    assert all(0.8 <= layer['kappa'][0] <= 1.2 for layer in layers
               if layer['type'] == 'AGLU')
    assert all(-1.0 <= layer['kappa'][0] <= 0.0 for layer in layers
               if layer['type'] == 'APA')


def test_plot_activations_reads_the_checkpoint(cls_configs, tmp_path):
    base, paths = cls_configs
    ckpt = tmp_path / 'edited.pth'
    save_checkpoint(paths['apase'], ckpt,
                    lambda m: m.backbone.layer1[0].act1.kappa_param.fill_(2.5))
    out = tmp_path / 'plots'
    run_tool('plot_activations.py', paths['apase'], ckpt, '--out-dir', out)
    layers = json.loads((out / 'activations.json').read_text())['layers']
    by_name = {layer['name']: layer for layer in layers}
    assert by_name['backbone.layer1.0.act1']['kappa'] == [2.5]

    # a checkpoint of another model is refused with the mismatching keys
    torch.save(dict(state_dict={'fc.weight': torch.zeros(1)}), ckpt)
    result = run_tool('plot_activations.py', paths['apase'], ckpt,
                      '--out-dir', out, check=False)
    assert result.returncode != 0
    assert 'missing keys' in result.stderr or 'unexpected key' in \
        result.stderr


def test_plot_activations_fles_scales(cls_configs, tmp_path):
    _, paths = cls_configs
    out = tmp_path / 'fles'
    result = run_tool('plot_activations.py', paths['fles'], '--out-dir', out,
                      '--num-samples', '4', '--split', 'val')
    assert_png(out / 'fles_scales.png')
    assert_png(out / 'fles_saturation.png')
    assert 'saturation' in result.stdout
    summary = json.loads((out / 'activations.json').read_text())['fles']
    assert len(summary) == 12  # PoolFormer-S12: one FleS per block
    for layer in summary.values():
        # at initialisation every scale is softplus(0.6)
        assert layer['k_ve_mean'] == pytest.approx(1.0375, abs=1e-3)
        assert layer['k_ho_mean'] == pytest.approx(1.0375, abs=1e-3)
        assert 0.0 <= layer['saturation'] <= 1.0


def test_attention_stats_initial_state_is_analytic(cls_configs, tmp_path):
    """With mmpretrain's zero_init_residual the attention input is zero, so
    every channel weight is APA(0) = (1 + lambda)^(-1/lambda) and Eq. 4
    gives the binary entropy of that value."""
    _, paths = cls_configs
    model = save_checkpoint(paths['apase'], tmp_path / 'init.pth')
    out = tmp_path / 'attention'
    run_tool('attention_stats.py', paths['apase'], tmp_path / 'init.pth',
             '--out-dir', out, '--num-samples', '4')
    layers = json.loads((out / 'attention_stats.json').read_text())['layers']
    assert len(layers) == 16
    for layer in layers:
        gate = model.get_submodule(layer['name']).gate
        lam = gate.lambda_param.clamp(min=gate.lambda_min).item()
        a = (1 + lam)**(-1 / lam)
        expected = -(a * math.log2(a) + (1 - a) * math.log2(1 - a))
        assert layer['entropy'] == pytest.approx(expected, rel=1e-5)
        assert layer['variance'] == pytest.approx(0.0, abs=1e-12)


def test_attention_stats_split_by_shots(cls_configs, tmp_path):
    _, paths = cls_configs

    def unzero_residuals(model):
        for block in model.backbone.modules():
            if hasattr(block, 'norm3'):  # registered as bn3
                block.norm3.weight.fill_(1.0)

    save_checkpoint(paths['apase'], tmp_path / 'ckpt.pth', unzero_residuals)
    out = tmp_path / 'attention'
    result = run_tool('attention_stats.py', paths['apase'],
                      tmp_path / 'ckpt.pth', '--out-dir', out,
                      '--num-samples', '10', '--many-threshold', '3',
                      '--few-threshold', '2')
    assert_png(out / 'attention_stats.png')
    stats = json.loads((out / 'attention_stats.json').read_text())
    # classes with 8, 4 | 2 | 1, 1 training images; 2 val images each
    assert stats['samples_per_group'] == dict(many=4, medium=2, few=4)
    assert len(stats['layers']) == 16
    for layer in stats['layers']:
        for group in ('', '_many', '_medium', '_few'):
            assert 0.0 < layer[f'entropy{group}'] <= 1.0
        assert layer['variance'] > 0
    # the groups see different images, hence different attention
    assert any(layer['entropy_many'] != layer['entropy_few']
               for layer in stats['layers'])
    assert 'entropy[few]' in result.stdout


def test_logit_distribution_classifier(cls_configs, tmp_path):
    _, paths = cls_configs
    out = tmp_path / 'logits'
    result = run_tool('logit_distribution.py', paths['apase'], '--out-dir',
                      out, '--num-samples', '10', '--classes', '0', '4')
    assert_png(out / 'logit_histograms.png')
    assert_png(out / 'logit_ks.png')
    report = json.loads((out / 'logit_distribution.json').read_text())
    assert report['rows'] == 10 and len(report['classes']) == 5
    for entry in report['classes']:
        assert 0 < entry['ks_gumbel'] < 1 and 0 < entry['ks_logistic'] < 1
    assert 'classes closer to the Gumbel' in result.stdout
    bad = run_tool('logit_distribution.py', paths['apase'], '--out-dir', out,
                   '--classes', '7', check=False)
    assert bad.returncode != 0 and '--classes: 7 is not in [0, 5)' in \
        bad.stderr


@pytest.fixture(scope='module')
def lvis_config(tmp_path_factory, toy_data_root):
    base = tmp_path_factory.mktemp('analysis_lvis')
    root = toy_data_root('lvis', num_train=6, num_val=2,
                         image_size=(128, 96), num_classes=10)
    cfg = adapt_config(Config.fromfile(str(APASE_LVIS)), root, 10,
                       work_dir=str(base / 'work'), batch_size=1)
    path = base / 'lvis.py'
    cfg.dump(str(path))
    return path


@pytest.mark.slow
def test_attention_and_logits_on_lvis_detector(lvis_config, tmp_path):
    result = run_tool('attention_stats.py', lvis_config, '--out-dir',
                      tmp_path, '--num-samples', '2')
    stats = json.loads((tmp_path / 'attention_stats.json').read_text())
    # images grouped by the rarest LVIS frequency among their objects
    assert set(stats['samples_per_group']) <= {'frequent', 'common', 'rare'}
    assert sum(stats['samples_per_group'].values()) == 2
    assert len(stats['layers']) == 16
    assert 'entropy' in result.stdout

    result = run_tool('logit_distribution.py', lvis_config, '--out-dir',
                      tmp_path, '--num-samples', '2')
    report = json.loads((tmp_path / 'logit_distribution.json').read_text())
    assert len(report['classes']) == 10  # foreground classes only
    assert report['rows'] > 2  # one row per RoI
    assert {c['group'] for c in report['classes']} <= {
        'frequent', 'common', 'rare'
    }
    assert_png(tmp_path / 'logit_ks.png')


def test_tools_refuse_models_without_what_they_measure(tmp_path):
    toy = REPO / 'configs/toy/mask-rcnn_r50_fpn_toy-coco.py'
    result = run_tool('plot_activations.py', toy, '--out-dir', tmp_path,
                      check=False)
    assert result.returncode != 0
    assert 'has no learned activation' in result.stderr
