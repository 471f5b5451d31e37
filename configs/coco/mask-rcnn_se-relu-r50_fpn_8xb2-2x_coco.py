# Mask R-CNN FPN with an SE-ResNet-50 (ReLU) backbone, 2x schedule on COCO:
# the baseline of Alexandridis et al. 2025, Table IX-a (40.5 box AP /
# 36.9 mask AP).
# Backbone from configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_2x_coco.py',
    '../_base_/models/se-relu_resnet.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.se_relu_r50_det, _delete_=True))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
