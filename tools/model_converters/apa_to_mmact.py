"""Convert a checkpoint of the reference APA code to mmact keys.

Usage::

    python tools/model_converters/apa_to_mmact.py SRC DST [--backbone-only]

SRC is a file or any URI mmengine loads (``https://...``); it is read through
mmact's allow-list (``--trust-checkpoint SRC`` to unpickle a file you trust
fully). A DST ending in ``.safetensors`` is written as safetensors weights
(needs the safetensors package) with the meta as JSON strings in its
metadata, anything else as a torch checkpoint. A model matched to an mmact
config carries that config's ``dataset_meta`` (class names, palette: LVIS
v1's and ImageNet's from the dataset classes, V3Det's from its label file
where it exists here), which mmdet's and mmpretrain's inferencers and
tools/misc/infer_image.py draw and name the classes with.

Classification checkpoints (``{'model': ...}``) become mmpretrain
``ImageClassifier`` weights (``backbone.*`` + ``head.fc.*``) and the inferred
backbone config is printed (with ``lambda_min=1e-8`` where a lambda is below
mmact's default floor: their classification AGLU floors at ``relu(l) +
1e-8``); an ImageNet-1k SE-ReLU / APA*+AGLU ResNet-50 / 101 / 152 or
APA*-CBAM+AGLU ResNet-50, or an ImageNet-LT ResNet-50 / ResNeXt-50 (cosine
classifier without bias) is matched
to its ``configs/imagenet`` config and checked to load strictly. Full
detector checkpoints of their LVIS Mask R-CNN (R50 with CARAFE
and a learned mask scale, R101 with deconv and a fixed one) and V3Det
Faster / Cascade R-CNN (wrapped Cauchy classifier) are matched to
the mmact config of that model, checked to load into it with
``strict=True``, and the config is printed.

Reference layouts handled:

- classification: ``{'model': state_dict, 'optimizer': ..., 'epoch': ...}``
  with keys ``conv1``, ``bn1``, ``relu.{lambda,kappa}_param`` (stem AGLU),
  ``layer{i}.{j}.conv{1,2,3}``, ``bn{1,2,3}``, ``unirect{1,2,3}.*`` (AGLU per
  position), ``downsample.{0,1}``, ``se.norm``, ``se.excitation.{0,2}``,
  ``se.uniact.*`` (APA gate), or ``cbam.ChannelGate.{norm,mlp.1,mlp.3,
  uniact}`` / ``cbam.SpatialGate.{spatial.conv,spatial.bn,uniact}`` (their
  CBAM), and the classifier ``fc.*``;
- its mmdet-fork detector files (GitHub kostas1515/AGLU,
  ``mmdetection_v3.2``): ``{'state_dict': ...}`` with ``backbone.*`` as
  above and mmdet's FPN / RPN / RoI-head names, the mask scale as
  ``roi_head.mask_head.conv_logits.tempearture`` (sic, shape ()).

Mapping to :class:`mmact.models.backbones.ActResNet`: ``unirect{k}`` ->
``act{k}``; ``se.norm`` -> ``attn.norm``; ``se.excitation.0`` -> ``attn.fc1``;
``se.excitation.2`` -> ``attn.fc2``; ``se.uniact`` -> ``attn.gate``; CBAM's
gates -> ``APACBAMAttention``'s ``channel_norm``, ``channel_mlp.{0,2}``,
``channel_gate``, ``spatial_conv``, ``spatial_norm``, ``spatial_gate``; ``fc`` ->
``head.fc`` (mmpretrain ``LinearClsHead``); ``conv_logits.tempearture`` ->
``conv_logits.scale_root`` (shape (1,)); ``fc_cls.g`` / ``fc_cls.s_`` ->
``fc_cls.concentration_logit`` / ``fc_cls.scale``; everything else keeps its
name.
Every source key matches a rule or is explicitly dropped (optimizer state
and the like); a key that matches none is an error naming it.
"""
import argparse
import re
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import torch

# Run from a checkout: mmact is imported for the key check.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mmact.models.backbones.reference_layout import (  # noqa: E402
    CONVERTER, preview_keys)

_BN = r'(weight|bias|running_mean|running_var|num_batches_tracked)'
_ACT = r'(lambda_param|kappa_param)'
# (source pattern, target template) for backbone-relative keys.
_RULES: List[Tuple[re.Pattern, str]] = [
    (re.compile(p), t) for p, t in [
        (r'^conv1\.weight$', r'conv1.weight'),
        (rf'^bn1\.{_BN}$', r'bn1.\1'),
        (rf'^relu\.{_ACT}$', r'relu.\1'),
        (r'^layer(\d+)\.(\d+)\.conv([123])\.weight$',
         r'layer\1.\2.conv\3.weight'),
        (rf'^layer(\d+)\.(\d+)\.bn([123])\.{_BN}$', r'layer\1.\2.bn\3.\4'),
        (rf'^layer(\d+)\.(\d+)\.unirect([123])\.{_ACT}$',
         r'layer\1.\2.act\3.\4'),
        (r'^layer(\d+)\.(\d+)\.downsample\.([01])\.' + _BN + '$',
         r'layer\1.\2.downsample.\3.\4'),
        (r'^layer(\d+)\.(\d+)\.se\.norm\.(weight|bias)$',
         r'layer\1.\2.attn.norm.\3'),
        (r'^layer(\d+)\.(\d+)\.se\.excitation\.0\.(weight|bias)$',
         r'layer\1.\2.attn.fc1.\3'),
        (r'^layer(\d+)\.(\d+)\.se\.excitation\.2\.(weight|bias)$',
         r'layer\1.\2.attn.fc2.\3'),
        (rf'^layer(\d+)\.(\d+)\.se\.uniact\.{_ACT}$',
         r'layer\1.\2.attn.gate.\3'),
        # CBAM (their classification/cbam.py) -> APACBAMAttention
        (r'^layer(\d+)\.(\d+)\.cbam\.ChannelGate\.norm\.(weight|bias)$',
         r'layer\1.\2.attn.channel_norm.\3'),
        (r'^layer(\d+)\.(\d+)\.cbam\.ChannelGate\.mlp\.1\.(weight|bias)$',
         r'layer\1.\2.attn.channel_mlp.0.\3'),
        (r'^layer(\d+)\.(\d+)\.cbam\.ChannelGate\.mlp\.3\.(weight|bias)$',
         r'layer\1.\2.attn.channel_mlp.2.\3'),
        (rf'^layer(\d+)\.(\d+)\.cbam\.ChannelGate\.uniact\.{_ACT}$',
         r'layer\1.\2.attn.channel_gate.\3'),
        (r'^layer(\d+)\.(\d+)\.cbam\.SpatialGate\.spatial\.conv\.weight$',
         r'layer\1.\2.attn.spatial_conv.weight'),
        (rf'^layer(\d+)\.(\d+)\.cbam\.SpatialGate\.spatial\.bn\.{_BN}$',
         r'layer\1.\2.attn.spatial_norm.\3'),
        (rf'^layer(\d+)\.(\d+)\.cbam\.SpatialGate\.uniact\.{_ACT}$',
         r'layer\1.\2.attn.spatial_gate.\3'),
    ]
]
_DEPTHS = {
    ((2, 2, 2, 2), False): 18,
    ((3, 4, 6, 3), False): 34,
    ((3, 4, 6, 3), True): 50,
    ((3, 4, 23, 3), True): 101,
    ((3, 8, 36, 3), True): 152,
}

# (source pattern, target template) for the detector's other parts: the
# authors' mmdet fork keeps mmdet's names, except the learned scale of the
# normalised mask predictor (their ``NormedConv2d(learnable_temp=True)``
# stores ``tempearture``, shape (); mmact's LearnableNormedConv2d stores
# ``scale_root``, shape (1,), with the same meaning: scale = root ** 2).
_HEAD_RULES: List[Tuple[re.Pattern, str]] = [
    (re.compile(p), t) for p, t in [
        (r'^neck\.(lateral|fpn)_convs\.(\d+)\.conv\.(weight|bias)$',
         r'neck.\1_convs.\2.conv.\3'),
        (r'^rpn_head\.rpn_(conv|cls|reg)\.(weight|bias)$',
         r'rpn_head.rpn_\1.\2'),
        (r'^roi_head\.bbox_head\.(\d+\.)?(shared_fcs\.\d+|fc_cls|fc_reg)\.'
         r'(weight|bias)$', r'roi_head.bbox_head.\1\2.\3'),
        # their V3Det wrapped Cauchy classifier (WCLinear: g, s_) ->
        # mmact WrappedCauchyLinear
        (r'^roi_head\.bbox_head\.(\d+\.)?fc_cls\.g$',
         r'roi_head.bbox_head.\1fc_cls.concentration_logit'),
        (r'^roi_head\.bbox_head\.(\d+\.)?fc_cls\.s_$',
         r'roi_head.bbox_head.\1fc_cls.scale'),
        (r'^roi_head\.mask_head\.convs\.(\d+)\.conv\.(weight|bias)$',
         r'roi_head.mask_head.convs.\1.conv.\2'),
        # deconv, or CARAFE (mmcv CARAFEPack / mmact CARAFEUpsample keys)
        (r'^roi_head\.mask_head\.upsample\.(weight|bias)$',
         r'roi_head.mask_head.upsample.\1'),
        (r'^roi_head\.mask_head\.upsample\.(channel_compressor|'
         r'content_encoder)\.(weight|bias)$',
         r'roi_head.mask_head.upsample.\1.\2'),
        (r'^roi_head\.mask_head\.conv_logits\.(weight|bias)$',
         r'roi_head.mask_head.conv_logits.\1'),
        (r'^roi_head\.mask_head\.conv_logits\.tempearture$',
         r'roi_head.mask_head.conv_logits.scale_root'),
    ]
]
# Classifier outputs of the authors' released detectors: LVIS v1 Mask R-CNN
# (GOL: one per category, no background), V3Det Faster / Cascade R-CNN
# (softmax: 13204 categories + background).
_LVIS_CLASSES = 1203
_V3DET_CLASSES = 13204 + 1


def _split_blocks(keys: Iterable[str]) -> Tuple[int, ...]:
    blocks: Dict[int, set] = {}
    for key in keys:
        match = re.match(r'^layer(\d+)\.(\d+)\.', key)
        if match:
            blocks.setdefault(int(match[1]), set()).add(int(match[2]))
    return tuple(len(blocks[i]) for i in sorted(blocks))


def infer_backbone_config(state_dict: Dict[str, torch.Tensor]) -> dict:
    """Infer the ``ActResNet`` / ``ActResNeXt`` config of a reference backbone.

    Args:
        state_dict (dict): Backbone-relative reference keys (no prefix).

    Returns:
        dict: Backbone config (``type``, ``depth``, ``act_cfg``,
        ``attention_cfg``, and ``groups``/``width_per_group`` for ResNeXt).

    Raises:
        ValueError: The keys do not describe a ResNet the backbones support.
    """
    if 'conv1.weight' not in state_dict or \
            'layer1.0.conv1.weight' not in state_dict:
        raise ValueError(
            'not a reference (SE-)ResNet checkpoint: expected keys '
            "'conv1.weight' and 'layer1.0.conv1.weight', found "
            f'{preview_keys(state_dict)}')
    stage_blocks = _split_blocks(state_dict)
    bottleneck = 'layer1.0.conv3.weight' in state_dict
    depth = _DEPTHS.get((stage_blocks, bottleneck))
    if depth is None:
        raise ValueError(f'blocks per stage {stage_blocks} (bottleneck='
                         f'{bottleneck}) match no supported ResNet depth '
                         f'{sorted(set(_DEPTHS.values()))}')
    cfg: dict = dict(type='ActResNet', depth=depth)
    conv2 = state_dict['layer1.0.conv2.weight']
    groups = conv2.shape[0] // conv2.shape[1]
    if groups > 1:
        cfg.update(
            type='ActResNeXt',
            groups=groups,
            width_per_group=conv2.shape[0] // groups)

    positions = 3 if bottleneck else 2
    act_keys = [k for k in state_dict if '.unirect' in k]
    if act_keys:
        shapes = {state_dict[k].numel() for k in act_keys}
        if shapes != {1}:
            raise ValueError('per-channel activation parameters (sizes '
                             f'{sorted(shapes)}) are not supported by the '
                             'converter; ActResNet shares one act_cfg')
        if 'relu.kappa_param' not in state_dict:
            raise ValueError('blocks use learnable activations (unirect*) but '
                             'the stem has none (relu.kappa_param); ActResNet '
                             'uses one act_cfg for stem and blocks')
        num_blocks = sum(stage_blocks)
        if len(act_keys) != 2 * positions * num_blocks:
            raise ValueError(f'expected {positions} learnable activations in '
                             f'each of the {num_blocks} blocks, found '
                             f'{len(act_keys) // 2}')
        # unirect = "unified rectifier", the reference name of AGLU.
        cfg['act_cfg'] = dict(type='AGLU')
    elif 'relu.kappa_param' in state_dict:
        raise ValueError('the stem has a learnable activation but the blocks '
                         'have none; ActResNet uses one act_cfg for both')

    se_keys = [k for k in state_dict if '.se.excitation.0.weight' in k]
    if se_keys:
        if len(se_keys) != sum(stage_blocks):
            raise ValueError(f'attention found in {len(se_keys)} of '
                             f'{sum(stage_blocks)} blocks; ActResNet puts it '
                             'in every block')
        weight = state_dict['layer1.0.se.excitation.0.weight']
        ratio = weight.shape[1] // weight.shape[0]
        use_norm = 'layer1.0.se.norm.weight' in state_dict
        bias = 'layer1.0.se.excitation.0.bias' in state_dict
        apa_gate = 'layer1.0.se.uniact.kappa_param' in state_dict
        if not apa_gate and not use_norm and bias:
            attention = dict(type='SEAttention', ratio=ratio)
        else:
            attention = dict(
                type='APASELayer',
                ratio=ratio,
                bias=bias,
                use_norm=use_norm,
                # Dropout has no parameters; 0.1 is the paper's APA* value.
                dropout=0.1 if (apa_gate and use_norm) else 0.0,
                gate_cfg=dict(type='APA') if apa_gate else dict(
                    type='Sigmoid'))
        cfg['attention_cfg'] = attention
    cbam_keys = [
        k for k in state_dict if '.cbam.ChannelGate.mlp.1.weight' in k
    ]
    if cbam_keys:
        if se_keys or len(cbam_keys) != sum(stage_blocks):
            raise ValueError(f'CBAM found in {len(cbam_keys)} of '
                             f'{sum(stage_blocks)} blocks (and SE in '
                             f'{len(se_keys)}); ActResNet puts one attention '
                             'in every block')
        weight = state_dict['layer1.0.cbam.ChannelGate.mlp.1.weight']

        def gate(part: str) -> dict:
            return dict(
                type='APA') if (f'layer1.0.cbam.{part}.uniact.kappa_param'
                                in state_dict) else dict(type='Sigmoid')

        # their ChannelGate always has the LayerNorm and Dropout(0.1)
        cfg['attention_cfg'] = dict(
            type='APACBAMAttention',
            ratio=weight.shape[1] // weight.shape[0],
            use_norm='layer1.0.cbam.ChannelGate.norm.weight' in state_dict,
            dropout=0.1,
            channel_gate_cfg=gate('ChannelGate'),
            spatial_gate_cfg=gate('SpatialGate'))
    return cfg


def expected_backbone_keys(cfg: dict) -> Dict[str, torch.Size]:
    """State-dict keys and shapes of the backbone ``cfg`` builds.

    Built on the CPU (upstream's constructor calls ``.item()``, which the
    ``meta`` device does not support); ResNet-152 takes a few seconds.

    Args:
        cfg (dict): Output of :func:`infer_backbone_config`.

    Returns:
        dict: ``{key: shape}``.
    """
    from mmact.models.backbones import act_resnet
    cfg = dict(cfg)
    cls = getattr(act_resnet, cfg.pop('type'))
    model = cls(**cfg)
    return {k: v.shape for k, v in model.state_dict().items()}


def convert_apa_backbone(
        state_dict: Dict[str, torch.Tensor],
        validate: bool = True
) -> Tuple['OrderedDict[str, torch.Tensor]', dict]:
    """Convert backbone-relative reference keys to ActResNet keys.

    Args:
        state_dict (dict): Reference backbone weights (no prefix, no ``fc``).
        validate (bool): Compare with the inferred model's keys and shapes
            (needs mmpretrain and the activation types). Defaults to True.

    Returns:
        tuple: Converted state dict and the inferred backbone config.

    Raises:
        ValueError: Unmapped source keys, or missing / extra / misshaped
            target keys (each listed).
    """
    cfg = infer_backbone_config(state_dict)
    out: 'OrderedDict[str, torch.Tensor]' = OrderedDict()
    unmapped = []
    for key, value in state_dict.items():
        for pattern, template in _RULES:
            if pattern.match(key):
                out[pattern.sub(template, key)] = value
                break
        else:
            unmapped.append(key)
    if unmapped:
        raise ValueError(
            f'{len(unmapped)} backbone keys match no conversion '
            f'rule (another architecture?): {preview_keys(unmapped)}')
    if not validate:
        return out, cfg
    expected = expected_backbone_keys(cfg)
    for key, shape in expected.items():
        # Older torch versions saved no BN step counters; they are unused
        # with momentum-based BN, so a zero counter is exact.
        if key not in out and key.endswith('num_batches_tracked'):
            out[key] = torch.tensor(0, dtype=torch.long)
    missing = sorted(set(expected) - set(out))
    extra = sorted(set(out) - set(expected))
    if missing or extra:
        raise ValueError(
            f'converted keys do not match {cfg}: missing '
            f'{preview_keys(missing)}; unexpected {preview_keys(extra)}')
    bad = []
    for key, shape in expected.items():
        value = out[key]
        if value.shape != shape:
            if value.numel() == shape.numel():
                # Scalar activation parameters are () or (1,) depending on
                # the implementation; 1x1 conv excitation weights -> linear.
                out[key] = value.reshape(shape)
            else:
                bad.append(f'{key}: {tuple(value.shape)} vs {tuple(shape)}')
    if bad:
        raise ValueError(f'shape mismatch for {cfg}: {bad[:8]}')
    return out, cfg


def convert_apa_checkpoint(checkpoint: dict,
                           backbone_only: bool = False,
                           validate: bool = True) -> Tuple[dict, dict]:
    """Convert a reference classification or detection checkpoint.

    Args:
        checkpoint (dict): Loaded reference checkpoint.
        backbone_only (bool): Drop the classifier / detector heads and save
            the backbone with the ``backbone.`` prefix only. Defaults to False.
        validate (bool): See :func:`convert_apa_backbone`.

    Returns:
        tuple: ``({'state_dict': ..., 'meta': {...}}, report)`` where report
        lists ``layout``, ``backbone_cfg``, ``config``, ``classes``,
        ``dropped`` and ``passed_through`` keys; ``meta`` holds the matched
        config's ``dataset_meta`` (see :func:`config_class_names`).

    Raises:
        ValueError: Unknown layout or keys (see :func:`convert_apa_backbone`).
    """
    if not isinstance(checkpoint, dict):
        raise ValueError(f'expected a dict checkpoint, got '
                         f'{type(checkpoint).__name__}')
    dropped: List[str] = []
    if 'state_dict' in checkpoint:
        container = 'state_dict'
    elif 'model' in checkpoint and isinstance(checkpoint['model'], dict):
        container = 'model'
    elif checkpoint and all(
            isinstance(v, torch.Tensor) for v in checkpoint.values()):
        container = None
    else:
        raise ValueError(
            "no 'model' or 'state_dict' entry and not a flat "
            f'state dict; top-level keys: {preview_keys(checkpoint)}')
    if container is None:
        source = dict(checkpoint)
    else:
        source = dict(checkpoint[container])
        # Optimiser state, epoch counters, args, EMA copies, ... do not
        # belong to the weights being converted.
        dropped += [f'<top-level> {k}' for k in checkpoint if k != container]
    if source and all(k.startswith('module.') for k in source):
        source = {k[len('module.'):]: v for k, v in source.items()}

    passed: List[str] = []
    out: 'OrderedDict[str, torch.Tensor]' = OrderedDict()
    if any(k.startswith('backbone.') for k in source):
        layout = 'detector'
        backbone = {
            k[len('backbone.'):]: v
            for k, v in source.items() if k.startswith('backbone.')
        }
        rest = {
            k: v
            for k, v in source.items() if not k.startswith('backbone.')
        }
    else:
        layout = 'classification'
        backbone = {
            k: v
            for k, v in source.items() if not re.match(r'^fc\.', k)
        }
        rest = {k: v for k, v in source.items() if re.match(r'^fc\.', k)}
    converted, cfg = convert_apa_backbone(backbone, validate=validate)
    if layout == 'classification':
        _set_lambda_min(cfg, backbone)
    out.update((f'backbone.{k}', v) for k, v in converted.items())
    unmapped = []
    for key, value in rest.items():
        if backbone_only:
            dropped.append(key)
        elif layout == 'classification':
            out[f'head.{key}'] = value  # mmpretrain LinearClsHead.fc
        else:
            for pattern, template in _HEAD_RULES:
                if pattern.match(key):
                    out[pattern.sub(template, key)] = value
                    passed.append(key)
                    break
            else:
                unmapped.append(key)
    if unmapped:
        raise ValueError(
            f'{len(unmapped)} detector keys match no conversion rule '
            '(expected an FPN detector of the authors\' LVIS / V3Det '
            'configs: neck.*, rpn_head.*, roi_head.bbox_head.*, '
            'roi_head.mask_head.*):'
            f' {preview_keys(unmapped)}')
    config = None
    if layout == 'detector' and not backbone_only:
        config = matching_config(out, cfg)
    elif layout == 'classification' and not backbone_only:
        config = matching_classifier_config(out, cfg)
    if config is not None and validate:
        check_loads_strictly(out, config)
    meta = dict(
        converted_by='mmact ' + CONVERTER, layout=layout, backbone_cfg=cfg)
    classes = None
    if config is not None:
        dataset_meta, classes = config_class_names(config)
        if dataset_meta is not None:
            meta['dataset_meta'] = dataset_meta
    report = dict(
        layout=layout,
        backbone_cfg=cfg,
        config=config,
        classes=classes,
        dropped=dropped,
        passed_through=passed,
        num_keys=len(out))
    return dict(state_dict=out, meta=meta), report


def _set_lambda_min(cfg: dict, backbone: Dict[str, torch.Tensor]) -> None:
    """The authors' classification AGLU floors lambda at ``relu(l) + 1e-8``
    (``classification/resnet_pytorch.py``), mmact's AGLU at ``lambda_min``
    (1e-4 by default, their detectors' floor): below 1e-4 the converted
    model needs ``lambda_min=1e-8`` to compute their outputs."""
    lambdas = [
        v for k, v in backbone.items()
        if k.endswith('lambda_param') and '.se.' not in k
        and '.cbam.' not in k  # their gates floor at 1e-4, as mmact's
    ]
    if 'act_cfg' in cfg and lambdas and min(float(v.min())
                                            for v in lambdas) < 1e-4:
        cfg['act_cfg'] = dict(cfg['act_cfg'], lambda_min=1e-8)


def matching_config(state_dict: Dict[str, torch.Tensor],
                    backbone_cfg: dict) -> str:
    """The mmact config whose model the converted detector is.

    Args:
        state_dict (dict): Converted detector weights.
        backbone_cfg (dict): The inferred backbone config.

    Returns:
        str: Config path relative to the repository root.

    Raises:
        ValueError: No shipped config has this architecture.
    """
    cascade = 'roi_head.bbox_head.0.fc_cls.weight' in state_dict
    fc_cls = state_dict.get('roi_head.bbox_head.'
                            f'{"0." if cascade else ""}fc_cls.weight')
    classes = None if fc_cls is None else fc_cls.shape[0]
    has_mask = 'roi_head.mask_head.conv_logits.weight' in state_dict
    act = backbone_cfg.get('act_cfg', {}).get('type')
    attention = backbone_cfg.get('attention_cfg', {}).get('type')
    variant = {
        ('AGLU', 'APASELayer'): 'apase-aglu-',
        (None, 'SEAttention'): 'se-relu-',
        (None, None): '',
    }.get((act, attention))
    depth = backbone_cfg.get('depth')
    if variant is not None and backbone_cfg['type'] == 'ActResNet':
        if has_mask and not cascade and classes == _LVIS_CLASSES and \
                depth in (50, 101):
            return (f'configs/lvis/mask-rcnn_{variant}r{depth}_fpn_gol-'
                    'normmask_8xb2-rfs-ms-2x_lvis-v1.py')
        if not has_mask and classes == _V3DET_CLASSES and depth == 50:
            detector = 'cascade' if cascade else 'faster'
            return (f'configs/v3det/{detector}-rcnn_{variant}r50_fpn_8xb4-'
                    'rfs-ms-2x_v3det.py')
    raise ValueError(
        'no mmact config has this detector: expected one of the authors\' '
        f'released models, LVIS Mask R-CNN ({_LVIS_CLASSES} classes, R50 / '
        f'R101) or V3Det Faster / Cascade R-CNN ({_V3DET_CLASSES} classifier '
        'outputs, R50), with an SE-ReLU or APA*+AGLU backbone; got '
        f'{classes} classifier outputs, cascade {cascade}, mask head '
        f'{has_mask}, backbone {backbone_cfg}')


def matching_classifier_config(state_dict: Dict[str, torch.Tensor],
                               backbone_cfg: dict) -> Optional[str]:
    """The ImageNet-1k config of a converted classifier (SE-ReLU or
    APA*+AGLU ResNet-50 / 101 / 152 with a 1000-way linear ``fc``), None
    for other classifiers (their backbone config is printed instead)."""
    act = backbone_cfg.get('act_cfg', {}).get('type')
    attention = backbone_cfg.get('attention_cfg', {})
    gates = (attention.get('channel_gate_cfg', {}).get('type'),
             attention.get('spatial_gate_cfg', {}).get('type'))
    variant = {
        ('AGLU', 'APASELayer'):
        'apase-aglu',
        (None, 'SEAttention'):
        'se-relu',
        ('AGLU', 'APACBAMAttention'):
        'apacbam-aglu'
        if gates == ('APA', 'APA') and attention.get('use_norm') else None,
    }.get((act, attention.get('type')))
    fc = state_dict.get('head.fc.weight')
    if variant is None or fc is None or fc.shape[0] != 1000:
        return None
    depth = backbone_cfg['depth']
    if 'head.fc.bias' not in state_dict:
        # their ImageNet-LT models: cosine-normalised classifier, no bias
        network = {
            ('ActResNet', 50): 'r50',
            ('ActResNeXt', 50): 'x50'
        }.get((backbone_cfg['type'], depth))
        if network is None or variant == 'apacbam-aglu':
            return None
        return (f'configs/imagenet/{variant}-{network}_cos-cls_8xb32-coslr-'
                '200e_in1k-lt.py')
    depths = (50, ) if variant == 'apacbam-aglu' else (50, 101, 152)
    if backbone_cfg['type'] != 'ActResNet' or depth not in depths:
        return None
    return (f'configs/imagenet/{variant}-r{depth}_8xb32-coslr-100e_in1k.py')


def config_class_names(config: str) -> Tuple[Optional[dict], str]:
    """The ``dataset_meta`` (class names, palette) of ``config``'s dataset,
    which mmdet's and mmpretrain's inferencers read from a checkpoint.

    LVIS v1, COCO and ImageNet name their classes in their dataset class;
    V3Det's come from its label file under the data root, read when it
    exists here.

    Returns:
        tuple: ``(dataset_meta or None, a line saying where the names come
        from or why there are none)``.

    Raises:
        ValueError: The dataset names another number of classes than the
            config's model predicts.
    """
    from mmact.utils.class_names import (config_dataset_meta,
                                         model_num_classes)
    from mmact.utils.preflight import load_config
    cfg = load_config(str(Path(__file__).resolve().parents[2] / config))
    dataset_meta, source = config_dataset_meta(cfg)
    if dataset_meta is None:
        return None, (f'class names: none written ({source}); '
                      'tools/misc/infer_image.py reads them from the '
                      "config's dataset, or numbers them")
    count, key = model_num_classes(cfg)
    names = len(dataset_meta['classes'])
    if count is not None and names != count:
        raise ValueError(f'{source} names {names} classes, {config} '
                         f'predicts {count} ({key})')
    return dataset_meta, f'class names: {names} from {source}'


def check_loads_strictly(state_dict: Dict[str, torch.Tensor],
                         config: str) -> None:
    """Build ``config``'s model and load ``state_dict`` into it with
    ``strict=True`` (scalars reshaped as the model holds them).

    The model is built on the ``meta`` device: keys and shapes are what the
    load checks, and a V3Det detector's random initialisation would take
    seconds. mmpretrain's classifiers read a value while they are built
    (``.item()``, which the meta device does not give): they are built on
    the CPU.

    Raises:
        ValueError: Missing, unexpected or misshaped keys, listed.
    """
    from mmengine.registry import MODELS, DefaultScope

    from mmact.engine.hooks import checkpoint_mismatch
    from mmact.utils.preflight import load_config
    cfg = load_config(str(Path(__file__).resolve().parents[2] / config))
    cfg.model.backbone.init_cfg = None  # no ImageNet checkpoint needed here
    cfg.model.pop('init_cfg', None)
    head = cfg.model.get('head') or {}
    if str(head.get('type', '')).startswith('PCSoftmax'):
        # the training prior is data read from the ImageNet-LT split, not a
        # weight (a non-persistent buffer): the plain head has the same keys
        head.type = head.type[len('PCSoftmax'):]
        head.pop('train_ann_file')
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        try:
            with torch.device('meta'):
                model = MODELS.build(cfg.model)
        except RuntimeError as error:  # a value read, named by torch
            if 'meta' not in str(error).lower():
                raise
            model = MODELS.build(cfg.model)
    for key, value in model.state_dict().items():
        given = state_dict.get(key)
        if given is not None and given.shape != value.shape and \
                given.numel() == value.numel() == 1:
            state_dict[key] = given.reshape(value.shape)
    mismatch = checkpoint_mismatch(model, state_dict)
    if mismatch:
        raise ValueError(f'the converted checkpoint does not fit {config}:\n'
                         f'{mismatch.describe()}')
    # assign: a meta model takes the tensors (copying into it is a no-op
    # that torch warns of, key by key)
    model.load_state_dict(state_dict, strict=True, assign=True)


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        'src', help='reference checkpoint: a file or a URL (.pth)')
    parser.add_argument(
        'dst',
        help='output checkpoint for mmact (.pth, or .safetensors for the '
        'weights as safetensors)')
    parser.add_argument(
        '--backbone-only',
        action='store_true',
        help='drop classifier / detector heads, keep backbone.* only')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip the key check against the inferred ActResNet (use when '
        'the activation types are not importable here)')
    from mmact.checkpoint import add_trust_argument
    add_trust_argument(parser)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    """Convert ``src`` and save it to ``dst``."""
    args = parse_args(argv)
    from mmengine.runner import CheckpointLoader

    import mmact  # noqa: F401  (registers the activations for validation)
    from mmact.checkpoint import safe_checkpoint_loading, save_safetensors
    from mmact.utils.preflight import check_checkpoint
    check_checkpoint(args.src)  # complete, before it is read
    with safe_checkpoint_loading(args.trust_checkpoint):
        checkpoint = CheckpointLoader.load_checkpoint(
            args.src, map_location='cpu')
    converted, report = convert_apa_checkpoint(
        checkpoint,
        backbone_only=args.backbone_only,
        validate=not args.no_validate)
    Path(args.dst).parent.mkdir(parents=True, exist_ok=True)
    if args.dst.endswith('.safetensors'):
        save_safetensors(
            converted['state_dict'],
            args.dst,
            metadata=dict(converted['meta'], source=args.src))
    else:
        torch.save(converted, args.dst)
    print(f'{report["layout"]} checkpoint: {report["num_keys"]} keys -> '
          f'{args.dst}')
    print(f'backbone config: {report["backbone_cfg"]}')
    if report['classes']:
        print(report['classes'])
    if report['config']:
        lambda_min = report['backbone_cfg'].get('act_cfg',
                                                {}).get('lambda_min')
        options = '' if lambda_min is None else (
            ' --cfg-options model.backbone.act_cfg.lambda_min='
            f'{lambda_min:g}')
        print(f'loads with strict=True into {report["config"]}; test with '
              f'tools/dist_test.sh {report["config"]} {args.dst} 8{options}')
    if report['passed_through']:
        print(f'{len(report["passed_through"])} neck / head keys mapped')
    if report['dropped']:
        print(f'dropped: {", ".join(report["dropped"])}')


if __name__ == '__main__':
    from mmact.utils.refusal import INPUT_ERRORS, run_tool

    # every step reads the source: its errors are refusals of it
    run_tool(main, refuse=INPUT_ERRORS)
