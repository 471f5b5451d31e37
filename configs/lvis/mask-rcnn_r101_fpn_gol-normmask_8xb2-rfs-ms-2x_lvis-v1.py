# Mask R-CNN FPN on LVIS v1 with a plain ResNet-101 (torchvision ImageNet
# weights), GOL, normalised mask with learnable scale, RFS, multi-scale 2x.
# Alexandridis et al. 2025, Table V row "GOL [15]", R101: 29.0 mask AP (AP^r 22.8, AP^c 29.0,
# AP^f 31.7), 29.2 box AP -- the GOL paper's own result (see the R50 config).
_base_ = './mask-rcnn_r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py'

model = dict(
    backbone=dict(
        depth=101, init_cfg=dict(checkpoint='torchvision://resnet101')))
