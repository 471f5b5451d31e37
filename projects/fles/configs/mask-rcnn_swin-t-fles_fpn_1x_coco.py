# Mask R-CNN FPN with a FleS Swin-T backbone, 1x schedule on COCO. The FleS
# paper reports no Swin detector; this config is the Swin-T detection setup
# of mmdet (mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: AdamW lr 1e-4, weight
# decay 0.05, 1000-iteration warm-up, steps at epochs 8 and 11, batch 16)
# with FleS in every FFN, its indicator over 9x15 windows of each stage's
# token grid as in the paper's COCO setting. mmdet's GELU Swin-T reaches
# 42.7 box / 39.3 mask AP with this schedule.
#
# The backbone starts from the FleS ImageNet checkpoint written by
#   tools/dist_train.sh projects/fles/configs/swin-tiny_fles_16xb64_in1k.py 16
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

fles_checkpoint = 'work_dirs/swin-tiny_fles_16xb64_in1k/epoch_310.pth'
# Window (h, w) in pixels of each stage's token grid (clamped on small
# maps); window_grid=(9, 15) would tile every map into 9x15 windows instead.
fles_det = dict(type='FleS', window_size=(9, 15), reduction=32)

# mmpretrain's Swin (the classifier's backbone, so the ImageNet checkpoint
# loads under prefix 'backbone.') with its blocks handing FleS the token
# grid. pad_small_map pads maps smaller than the 7x7 attention window, as
# detection Swins do. MaterializedModel runs one dry forward through the
# backbone so every FleS parameter exists before the optimizer is built.
model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 288, 480),
    submodule='backbone',
    model=dict(
        _base_.model,
        backbone=dict(
            type='FleSSwinTransformer',
            arch='tiny',
            drop_path_rate=0.2,
            out_indices=(0, 1, 2, 3),
            pad_small_map=True,
            act_cfg=fles_det,
            init_cfg=dict(
                type='Pretrained',
                checkpoint=fles_checkpoint,
                prefix='backbone.'))))

# The stock Swin keys without decay (position tables, norms) stay; the
# constructor adds what FleS declares in no_decay_params (its biases).
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
