# Cascade R-CNN FPN with a plain ResNet-50 (torchvision ImageNet weights) on
# V3Det, mmdet's V3Det recipe unchanged: 13204 classes, RFS (1e-3),
# multi-scale training, cosine (NormedLinear) classifiers with sigmoid CE,
# class-agnostic regression, AdamW lr 1e-4 wd 0.1 for batch 32 (8 GPUs x 4),
# 2x (137520 iterations).
# Alexandridis et al. 2025, Table IX-c: 31.6 box AP.
_base_ = [
    'mmdet::v3det/cascade_rcnn_r50_fpn_8x4_sample1e-3_mstrain_v3det_2x.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
