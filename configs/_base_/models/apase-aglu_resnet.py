# APA*+AGLU ResNet-50 / -101 (Alexandridis et al., Adaptive Parametric
# Activation, Sec. V-B): AGLU at every activation position (stem included)
# and APA* channel attention (LayerNorm, dropout 0.1, APA gate).
#
# apase_aglu_r{50,101}_cls: the mmpretrain backbone, trained on ImageNet-1k
#   by configs/imagenet/apase-aglu-r{50,101}_8xb32-coslr-100e_in1k.py
# apase_aglu_r{50,101}_det: the same network for mmdet FPN detectors (four
#   stages out, stem + stage 1 frozen, BN in eval mode), initialised from the
#   checkpoint that ImageNet config writes into its work dir. ActResNet has
#   the same state-dict keys in mmpretrain and mmdet: prefix='backbone.' maps
#   the classifier's backbone onto the detector's.
# Use: model = dict(backbone=dict(_delete_=True, **_base_.apase_aglu_r50_det))
# The R101 variants are the R50 ones with depth 101 and their own checkpoint.
# Inits follow the authors' code that trained the released models (GitHub
# kostas1515/AGLU): APA gate kappa ~ U(-1, 0) (mmact's APA default) in both;
# AGLU kappa ~ U(0.8, 1.2) in their classification code
# (classification/resnet_pytorch.py), U(1, 1.3) (mmact's AGLU default) in
# their detection backbone (mmdetection_v3.2/mmdet/models/backbones/
# se_resnet.py); lambda ~ U(0, 1). The paper's appendix text gives APA
# kappa ~ U(0, 1) for balanced ImageNet-1k (configs/README.md).
apase_aglu_r50_cls = dict(
    type='ActResNet',
    depth=50,
    act_cfg=dict(type='AGLU', kappa_init=(0.8, 1.2)),
    attention_cfg=dict(type='APASELayer'),
    num_stages=4,
    out_indices=(3, ),
    style='pytorch')
# Written by `tools/dist_train.sh configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py 8`
apase_aglu_r50_checkpoint = ('work_dirs/apase-aglu-r50_8xb32-coslr-100e_in1k/'
                             'epoch_100.pth')
apase_aglu_r50_det = dict(
    apase_aglu_r50_cls,
    act_cfg=dict(type='AGLU'),
    out_indices=(0, 1, 2, 3),
    frozen_stages=1,
    norm_cfg=dict(type='BN', requires_grad=True),
    norm_eval=True,
    init_cfg=dict(
        type='Pretrained',
        checkpoint=apase_aglu_r50_checkpoint,
        prefix='backbone.'))

apase_aglu_r101_cls = dict(apase_aglu_r50_cls, depth=101)
# Written by `tools/dist_train.sh configs/imagenet/apase-aglu-r101_8xb32-coslr-100e_in1k.py 8`
apase_aglu_r101_checkpoint = (
    'work_dirs/apase-aglu-r101_8xb32-coslr-100e_in1k/epoch_100.pth')
apase_aglu_r101_det = dict(
    apase_aglu_r50_det,
    depth=101,
    init_cfg=dict(
        apase_aglu_r50_det['init_cfg'], checkpoint=apase_aglu_r101_checkpoint))
