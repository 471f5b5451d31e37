# RetinaNet FPN with an APA*+AGLU ResNet-50 backbone, 2x schedule on COCO.
# No paper number. Backbone from
# configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    'mmdet::retinanet/retinanet_r50_fpn_2x_coco.py',
    '../_base_/models/apase-aglu_resnet.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
