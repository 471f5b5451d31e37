# RetinaNet FPN with a Meta-ACON PoolFormer-S12 backbone, 1x schedule on
# COCO: the GELU baseline's detector and recipe (FleS paper, App. J) with
# Meta-ACON in every token-MLP, initialised from the Meta-ACON ImageNet
# checkpoint written by
#   tools/dist_train.sh projects/fles/configs/poolformer-s12_meta-acon_8xb128_in1k.py 8
# Paper (FleS, Tab. 25): 35.5 mAP (GELU 35.5, FleS 36.2).
_base_ = './retinanet_poolformer-s12_fpn_1x_coco.py'

meta_acon_checkpoint = ('work_dirs/poolformer-s12_meta-acon_8xb128_in1k/'
                        'epoch_310.pth')
# norm_eval: the BatchNorms of the beta network keep their ImageNet running
# statistics. With 2 images per GPU, batch statistics of the pooled vectors
# would normalise every channel to +-1 (and 1 image fails); mmdet freezes
# backbone BatchNorm statistics for the same reason.
meta_acon = dict(type='MetaACON', norm_eval=True)

# Meta-ACON infers its channel count lazily: MaterializedModel runs one
# no-grad dry forward through the backbone when the Runner builds the model
# (checkpoint keys unchanged).
model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 288, 480),
    submodule='backbone',
    model=dict(
        _base_.model,
        backbone=dict(
            _base_.model.backbone,
            act_cfg=meta_acon,
            init_cfg=dict(
                type='Pretrained',
                checkpoint=meta_acon_checkpoint,
                prefix='backbone.'))))
# p1, p2, biases and norm affines get no weight decay (declared by MetaACON;
# all 1-D parameters); the two weight matrices are decayed.
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
