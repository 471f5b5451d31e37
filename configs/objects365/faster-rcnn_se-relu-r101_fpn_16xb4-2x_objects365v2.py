# Faster R-CNN FPN with an SE-ResNet-101 (ReLU) backbone on Objects365 v2
# (2x). Alexandridis et al. 2025, Table IX-b: 29.3 box AP.
# Backbone from configs/imagenet/se-relu-r101_8xb32-coslr-100e_in1k.py.
_base_ = './faster-rcnn_se-relu-r50_fpn_16xb4-2x_objects365v2.py'

model = dict(backbone=dict(_base_.se_relu_r101_det, _delete_=True))
