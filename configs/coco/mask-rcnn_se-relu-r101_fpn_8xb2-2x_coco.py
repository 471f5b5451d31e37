# Mask R-CNN FPN with an SE-ResNet-101 (ReLU) backbone, 2x schedule on COCO.
# Alexandridis et al. 2025, Table IX-a: 42.7 box AP / 38.4 mask AP.
# Backbone from configs/imagenet/se-relu-r101_8xb32-coslr-100e_in1k.py.
_base_ = './mask-rcnn_se-relu-r50_fpn_8xb2-2x_coco.py'

model = dict(backbone=dict(_base_.se_relu_r101_det, _delete_=True))
