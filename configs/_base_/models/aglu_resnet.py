# AGLU ResNet-50 without channel attention (Alexandridis et al., Adaptive
# Parametric Activation, Table VI-a "ResNet50 w/ AGLU"): AGLU at every
# activation position of a plain ResNet-50, stem included.
#
# aglu_r50_cls: the mmpretrain backbone, trained on ImageNet-1k by
#   configs/imagenet/aglu-r50_8xb32-coslr-100e_in1k.py
# aglu_r50_det: the same network for any mmdet ResNet detector (four stages
#   out, stem + stage 1 frozen, BN in eval mode), initialised from the
#   checkpoint that ImageNet config writes (prefix='backbone.' maps the
#   classifier's backbone onto the detector's).
# Use: model = dict(backbone=dict(_base_.aglu_r50_det, _delete_=True))
# AGLU kappa ~ U(0.8, 1.2) as the authors' classification code
# (apase-aglu_resnet.py); the detection variant keeps U(1, 1.3).
aglu_r50_cls = dict(
    type='ActResNet',
    depth=50,
    act_cfg=dict(type='AGLU', kappa_init=(0.8, 1.2)),
    attention_cfg=None,
    num_stages=4,
    out_indices=(3, ),
    style='pytorch')
# Written by `tools/dist_train.sh configs/imagenet/aglu-r50_8xb32-coslr-100e_in1k.py 8`
aglu_r50_checkpoint = 'work_dirs/aglu-r50_8xb32-coslr-100e_in1k/epoch_100.pth'
aglu_r50_det = dict(
    aglu_r50_cls,
    act_cfg=dict(type='AGLU'),
    out_indices=(0, 1, 2, 3),
    frozen_stages=1,
    norm_cfg=dict(type='BN', requires_grad=True),
    norm_eval=True,
    init_cfg=dict(
        type='Pretrained', checkpoint=aglu_r50_checkpoint, prefix='backbone.'))
