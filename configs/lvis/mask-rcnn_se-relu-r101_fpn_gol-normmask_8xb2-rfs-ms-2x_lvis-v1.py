# Mask R-CNN FPN on LVIS v1 with an SE-ResNet-101 (ReLU) backbone, GOL,
# normalised mask, RFS, multi-scale 2x.
# Alexandridis et al. 2025, Table V: 29.7 mask AP / 30.0 box AP.
# Backbone from configs/imagenet/se-relu-r101_8xb32-coslr-100e_in1k.py.
_base_ = './mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py'

model = dict(backbone=dict(_base_.se_relu_r101_det, _delete_=True))
