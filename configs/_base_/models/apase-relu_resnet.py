# APA*-ResNet-50 with ReLU activations (Alexandridis et al., Adaptive
# Parametric Activation, Sec. V-B): APA* channel attention (LayerNorm,
# dropout 0.1, APA gate) in every bottleneck, the activations left ReLU.
#
# apase_relu_r50_cls: the mmpretrain backbone, trained on ImageNet-1k by
#   configs/imagenet/apase-relu-r50_8xb32-coslr-100e_in1k.py
# apase_relu_r50_det: the same network for any mmdet ResNet detector (four
#   stages out, stem + stage 1 frozen, BN in eval mode), initialised from
#   the checkpoint that ImageNet config writes (prefix='backbone.').
# Use: model = dict(backbone=dict(_base_.apase_relu_r50_det, _delete_=True))
apase_relu_r50_cls = dict(
    type='ActResNet',
    depth=50,
    act_cfg=dict(type='ReLU', inplace=True),
    attention_cfg=dict(type='APASELayer'),
    num_stages=4,
    out_indices=(3, ),
    style='pytorch')
# Written by `tools/dist_train.sh configs/imagenet/apase-relu-r50_8xb32-coslr-100e_in1k.py 8`
apase_relu_r50_checkpoint = ('work_dirs/apase-relu-r50_8xb32-coslr-100e_in1k/'
                             'epoch_100.pth')
apase_relu_r50_det = dict(
    apase_relu_r50_cls,
    out_indices=(0, 1, 2, 3),
    frozen_stages=1,
    norm_cfg=dict(type='BN', requires_grad=True),
    norm_eval=True,
    init_cfg=dict(
        type='Pretrained',
        checkpoint=apase_relu_r50_checkpoint,
        prefix='backbone.'))
