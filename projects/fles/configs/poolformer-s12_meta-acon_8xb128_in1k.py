# PoolFormer-S12 with Meta-ACON (Ma et al., Activate or Not: Learning
# Customized Activation, 2021) in every token-MLP, ImageNet-1k from scratch
# with the same recipe as the FleS model (the FleS paper trains every
# competing activation with it). Paper (FleS, Tab. 2): 78.0 top-1 (GELU
# 77.2, FleS 79.4), 14.3M parameters.
#
# The final checkpoint, work_dirs/poolformer-s12_meta-acon_8xb128_in1k/
# epoch_310.pth, initialises retinanet_poolformer-s12-meta-acon_fpn_1x_coco.py.
_base_ = './poolformer-s12_fles_8xb128_in1k.py'

# The authors' layer: beta = sigmoid(BN(W2 BN(W1 mean(x)))), r = 16, at
# least 16 hidden units; the BatchNorms use the statistics of each GPU's
# 128 images. Lazy channel count: the inherited MaterializedModel wrapper
# materialises it.
model = dict(
    model=dict(backbone=dict(act_cfg=dict(_delete_=True, type='MetaACON'))))
