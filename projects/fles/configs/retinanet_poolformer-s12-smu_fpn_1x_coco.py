# RetinaNet FPN with an SMU PoolFormer-S12 backbone, 1x schedule on COCO:
# the GELU baseline's detector and recipe (FleS paper, App. J) with SMU in
# every token-MLP, initialised from the SMU ImageNet checkpoint written by
#   tools/dist_train.sh projects/fles/configs/poolformer-s12_smu_8xb128_in1k.py 8
# Paper (FleS, Tab. 25): 35.4 mAP (GELU 35.5, FleS 36.2).
_base_ = './retinanet_poolformer-s12_fpn_1x_coco.py'

smu_checkpoint = 'work_dirs/poolformer-s12_smu_8xb128_in1k/epoch_310.pth'
model = dict(
    backbone=dict(
        act_cfg=dict(_delete_=True, type='SMU'),
        init_cfg=dict(checkpoint=smu_checkpoint)))
# mu gets no weight decay (declared by SMU; also a 1-D parameter)
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
