# Mask R-CNN FPN with an APA*+AGLU ResNet-50 backbone, 2x schedule on COCO.
# Alexandridis et al. 2025, Table IX-a: 41.2 box AP / 37.6 mask AP (SE-R50: 40.5 / 36.9).
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './mask-rcnn_se-relu-r50_fpn_8xb2-2x_coco.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
