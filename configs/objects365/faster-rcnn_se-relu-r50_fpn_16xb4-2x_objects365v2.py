# Faster R-CNN FPN with an SE-ResNet-50 (ReLU) backbone on Objects365 v2:
# mmdet's Objects365 v2 recipe (365 classes, SGD lr 0.08 for batch 64 =
# 16 GPUs x 4, grad clip 35; with 8 GPUs add --auto-scale-lr) on the 2x
# schedule the paper uses for every detector (24 epochs, steps at 16, 22).
# Alexandridis et al. 2025, Table IX-b: 26.4 box AP.
# Backbone from configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    'mmdet::objects365/faster-rcnn_r50_fpn_16xb4-1x_objects365v2.py',
    '../_base_/models/se-relu_resnet.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.se_relu_r50_det, _delete_=True))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')

max_epochs = 24
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1.0 / 1000,
        by_epoch=False,
        begin=0,
        end=1000),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[16, 22],
        gamma=0.1)
]
