# SE-ResNet-50 / -101: ReLU activations and SE channel attention (sigmoid
# gate, no LayerNorm, no dropout), the baseline of Alexandridis et al.,
# Adaptive Parametric Activation.
#
# se_relu_r{50,101}_cls: the mmpretrain backbone, trained on ImageNet-1k by
#   configs/imagenet/se-relu-r{50,101}_8xb32-coslr-100e_in1k.py
# se_relu_r{50,101}_det: the same network for mmdet FPN detectors (four
#   stages out, stem + stage 1 frozen, BN in eval mode), initialised from the
#   checkpoint that ImageNet config writes into its work dir. ActResNet has
#   the same state-dict keys in mmpretrain and mmdet: prefix='backbone.' maps
#   the classifier's backbone onto the detector's.
# Use: model = dict(backbone=dict(_delete_=True, **_base_.se_relu_r50_det))
# The R101 variants are the R50 ones with depth 101 and their own checkpoint.
se_relu_r50_cls = dict(
    type='ActResNet',
    depth=50,
    act_cfg=dict(type='ReLU', inplace=True),
    attention_cfg=dict(type='SEAttention'),
    num_stages=4,
    out_indices=(3, ),
    style='pytorch')
# Written by `tools/dist_train.sh configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py 8`
se_relu_r50_checkpoint = ('work_dirs/se-relu-r50_8xb32-coslr-100e_in1k/'
                          'epoch_100.pth')
se_relu_r50_det = dict(
    se_relu_r50_cls,
    out_indices=(0, 1, 2, 3),
    frozen_stages=1,
    norm_cfg=dict(type='BN', requires_grad=True),
    norm_eval=True,
    init_cfg=dict(
        type='Pretrained',
        checkpoint=se_relu_r50_checkpoint,
        prefix='backbone.'))

se_relu_r101_cls = dict(se_relu_r50_cls, depth=101)
# Written by `tools/dist_train.sh configs/imagenet/se-relu-r101_8xb32-coslr-100e_in1k.py 8`
se_relu_r101_checkpoint = ('work_dirs/se-relu-r101_8xb32-coslr-100e_in1k/'
                           'epoch_100.pth')
se_relu_r101_det = dict(
    se_relu_r50_det,
    depth=101,
    init_cfg=dict(
        se_relu_r50_det['init_cfg'], checkpoint=se_relu_r101_checkpoint))
