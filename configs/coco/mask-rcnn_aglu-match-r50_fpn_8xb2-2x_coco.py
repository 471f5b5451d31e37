# Mask R-CNN R50-FPN 2x on COCO from mmdet's own ReLU ImageNet checkpoint
# (torchvision://resnet50) with every ReLU of the backbone replaced by an AGLU
# fitted to it (function-preserving swap, docs/design/swap.md): the
# detector starts from the function the checkpoint computes, and kappa /
# lambda learn from there. The paper instead pretrains APA*+AGLU on
# ImageNet (configs/coco/mask-rcnn_apase-aglu-r50_fpn_8xb2-2x_coco.py).
# torchvision's ResNet-50 has no SE gates; for an SE-ResNet checkpoint wrap
# this backbone once more with act_cfg=dict(type='APA'),
# target_types=('Sigmoid', ), match=True (exact: APA(1, 1) is the sigmoid).
# No paper result.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_2x_coco.py',
    '../_base_/models/aglu-match_resnet.py'
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _base_.aglu_match, _delete_=True, backbone=_base_.model.backbone))
# no weight decay on kappa / lambda (paper Table XV)
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
