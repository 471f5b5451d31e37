# APA*+AGLU ResNeXt-50 (32x4d) on ImageNet-LT, recipe and init of the
# APA*+AGLU ResNet-50 config (Alexandridis et al., Adaptive Parametric
# Activation, Table XV, column "ImageNet-LT R50/X50").
# Paper (Table II, X50): Many 69.8, Medium 55.7, Few 41.1; the table's
# average is missing from the paper text, Sec. V-C gives +0.7 over APA* X50
# (58.4), i.e. 59.1 (SE-X50 56.7).
_base_ = './apase-aglu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py'

model = dict(backbone=dict(type='ActResNeXt', groups=32, width_per_group=4))
