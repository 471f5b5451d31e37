# Mask R-CNN FPN on LVIS v1 with a plain ResNet-50 (ReLU, no attention,
# torchvision ImageNet weights), otherwise the recipe of the SE-ReLU config
# it inherits: GOL, normalised mask with learnable scale, RFS, multi-scale 2x.
# Alexandridis et al. 2025, Table V row "GOL [15]", R50: 27.7 mask AP (AP^r 21.4, AP^c 27.7,
# AP^f 30.4), 27.5 box AP -- the GOL paper's own result (Alexandridis et al.,
# Long-tailed instance segmentation using Gumbel optimized loss, 2022), whose
# recipe may differ in details from the one here.
_base_ = './mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py'

# mmdet's stock detection ResNet-50
model = dict(
    backbone=dict(
        _delete_=True,
        type='ResNet',
        depth=50,
        num_stages=4,
        out_indices=(0, 1, 2, 3),
        frozen_stages=1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=True,
        style='pytorch',
        init_cfg=dict(type='Pretrained', checkpoint='torchvision://resnet50')))
