# Cascade Mask R-CNN FPN with an APA*+AGLU ResNet-50 backbone, 2x schedule
# (24 epochs, steps at 16 and 22) on COCO. No paper number.
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    'mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py',
    '../_base_/models/apase-aglu_resnet.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')

# 2x schedule (mmdet's schedule_2x)
max_epochs = 24
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[16, 22],
        gamma=0.1)
]
