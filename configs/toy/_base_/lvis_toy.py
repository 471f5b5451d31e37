# What the generated LVIS v1-format set and two CPU cores force on the LVIS
# Mask R-CNN configs of configs/lvis/; the toy configs beside this folder
# merge these values into the real config they inherit: data root and
# classes, image scales, RFS threshold, schedule length, anchors / proposals
# / RoIs per image, and training from scratch (no ImageNet checkpoint, every
# stage trained, BN statistics from the batches, gradient clipping).
# Everything else (backbone, GOL loss, normalised mask predictor, RFS, SGD
# lr 0.02, test score threshold and detections per image, LVISMetric, zero
# decay on activation parameters) is the real config's. Names start with
# toy_ so that this file and a real config can both be bases of one config
# (mmengine forbids duplicate keys among bases).
#
# Data: `python tools/misc/generate_toy_data.py lvis --out-dir data/` (the
# first 20 LVIS v1 categories, rare / common / frequent by training counts).
toy_data_root = 'data/toy_lvis/'
toy_metainfo = dict(
    classes=('aerosol_can', 'air_conditioner', 'airplane', 'alarm_clock',
             'alcohol', 'alligator', 'almond', 'ambulance', 'amplifier',
             'anklet', 'antenna', 'apple', 'applesauce', 'apricot', 'apron',
             'aquarium', 'arctic_(type_of_shoe)', 'armband', 'armchair',
             'armoire'))
toy_num_classes = 20
# The generated images are 160x128 (LVIS: ~640x480 shown at 1333x800).
# Training keeps the real configs' multi-scale range, shorter side 80-100% of
# the test scale (640-800 there).
toy_test_scale = (160, 128)
toy_train_scales = [(160, 104), (160, 112), (160, 120), (160, 128)]
toy_max_epochs = 6
# The long-tail thresholds at the same point of the tail: on LVIS, RFS's
# 1e-3 and GOL's rare_threshold 0.0011 of ~100k images are ~100 images, the
# common/frequent boundary; the generated set's boundary is 7 of its 24
# training images.
toy_oversample_thr = 7 / 24
toy_gol_rare_thr = 1.1 * toy_oversample_thr

toy_model = dict(
    # No ImageNet checkpoint exists here: train every stage from scratch,
    # with BN statistics from the batches. As in mmdet's from-scratch
    # recipe (configs/scratch), the last BN of a residual branch does not
    # start at zero: a zero-initialised branch passes no gradient to its
    # activations and attention gates, which would then hardly train in
    # the demo's 84 iterations. init_cfg=[]: the backbone runs no init of
    # its own, every layer keeps PyTorch's default initialisation (the demo's
    # table is of that initialisation; in mmdet's registry, init_cfg=None
    # means mmdet's Kaiming init instead).
    backbone=dict(
        init_cfg=[],
        frozen_stages=-1,
        norm_eval=False,
        zero_init_residual=False),
    roi_head=dict(
        bbox_head=dict(
            num_classes=toy_num_classes,
            loss_cls=dict(rare_threshold=toy_gol_rare_thr)),
        mask_head=dict(num_classes=toy_num_classes)),
    # 1-4 shapes on a 160x128 image: far fewer anchors, proposals and RoIs
    # than on an 800x1333 LVIS image. 32 RoIs (at most 8 positives) per
    # image: the mask head on the positives is the costliest part of a CPU
    # step.
    train_cfg=dict(
        rpn=dict(sampler=dict(num=128)),
        rpn_proposal=dict(nms_pre=500, max_per_img=200),
        rcnn=dict(sampler=dict(num=32))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=200)))

toy_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize', scales=toy_train_scales, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
toy_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=toy_test_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
# Two cores: loading in the main process beats forking workers.
toy_train_dataloader = dict(
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        oversample_thr=toy_oversample_thr,
        dataset=dict(
            data_root=toy_data_root,
            metainfo=toy_metainfo,
            pipeline=toy_train_pipeline)))
toy_test_dataloader = dict(
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=toy_data_root,
        metainfo=toy_metainfo,
        pipeline=toy_test_pipeline))
toy_evaluator = dict(ann_file=toy_data_root + 'annotations/lvis_v1_val.json')

# Minutes instead of days: a 6-epoch schedule (84 iterations) with the real
# step decay at the same fractions of training (16/24 and 22/24, rounded
# down) and a 20-iteration warm-up. Training does not validate (val_begin
# after the last epoch): `make demo` evaluates with tools/dist_test.sh, and
# the same evaluation twice would not fit its time budget.
toy_train_cfg = dict(
    max_epochs=toy_max_epochs,
    val_interval=toy_max_epochs,
    val_begin=toy_max_epochs + 1)
toy_param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=20),
    dict(
        type='MultiStepLR',
        begin=0,
        end=toy_max_epochs,
        by_epoch=True,
        milestones=[4, 5],
        gamma=0.1)
]
# From scratch, with BN statistics of two images, the gradient norm spikes
# in the first epochs and training diverges (NaN) without clipping.
toy_optim_wrapper = dict(clip_grad=dict(max_norm=10, norm_type=2))
toy_default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=toy_max_epochs, max_keep_ckpts=1))
