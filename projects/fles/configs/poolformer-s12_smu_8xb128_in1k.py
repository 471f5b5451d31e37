# PoolFormer-S12 with SMU (Biswas et al., Smooth Maximum Unit, 2022) in every
# token-MLP, ImageNet-1k from scratch with the same recipe as the FleS model
# (the FleS paper trains every competing activation with it). Paper (FleS,
# Tab. 2): 77.3 top-1 (GELU 77.2, FleS 79.4).
#
# The final checkpoint, work_dirs/poolformer-s12_smu_8xb128_in1k/
# epoch_310.pth, initialises retinanet_poolformer-s12-smu_fpn_1x_coco.py.
_base_ = './poolformer-s12_fles_8xb128_in1k.py'

# alpha = 0.25 fixed, one learnable mu per layer starting at 1e6 (authors'
# code): SMU starts as Leaky ReLU(0.25). mu is a 1-D parameter without
# weight decay.
model = dict(
    model=dict(backbone=dict(act_cfg=dict(_delete_=True, type='SMU'))))
