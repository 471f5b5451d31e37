# SE-ResNeXt-50 (32x4d, ReLU) on ImageNet-LT, recipe of the SE-ResNet-50
# baseline (Alexandridis et al., Adaptive Parametric Activation, Table XV,
# column "ImageNet-LT R50/X50"), PC-Softmax predictions.
# Paper (Table II, "Our Baseline", X50): 56.7 top-1 (Many 67.9, Medium 53.0,
# Few 37.7).
_base_ = './se-relu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py'

model = dict(backbone=dict(type='ActResNeXt', groups=32, width_per_group=4))
