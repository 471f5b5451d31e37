# The toy Mask R-CNN on the generated LVIS v1-format set: long-tailed
# categories (rare/common/frequent), repeat-factor sampling and LVISMetric.
_base_ = './mask-rcnn_r50_fpn_toy-coco.py'

data_root = 'data/toy_lvis/'
# The 20 categories the generator writes by default (the first LVIS names).
metainfo = dict(
    classes=('aerosol_can', 'air_conditioner', 'airplane', 'alarm_clock',
             'alcohol', 'alligator', 'almond', 'ambulance', 'amplifier',
             'anklet', 'antenna', 'apple', 'applesauce', 'apricot', 'apron',
             'aquarium', 'arctic_(type_of_shoe)', 'armband', 'armchair',
             'armoire'))
num_classes = len(metainfo['classes'])
dataset_type = 'LVISV1Dataset'

model = dict(
    roi_head=dict(
        bbox_head=dict(num_classes=num_classes),
        mask_head=dict(num_classes=num_classes)),
    # LVIS protocol: low score threshold, up to 300 detections per image.
    test_cfg=dict(rcnn=dict(score_thr=0.0001, max_per_img=300)))

train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='ClassBalancedDataset',
        oversample_thr=1e-3,
        dataset=dict(
            type=dataset_type,
            data_root=data_root,
            ann_file='annotations/lvis_v1_train.json',
            data_prefix=dict(img=''),
            metainfo=metainfo,
            filter_cfg=dict(filter_empty_gt=True, min_size=32),
            pipeline={{_base_.train_pipeline}})))
val_dataloader = dict(
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='annotations/lvis_v1_val.json',
        data_prefix=dict(img=''),
        metainfo=metainfo))
test_dataloader = val_dataloader
val_evaluator = dict(
    _delete_=True,
    type='LVISMetric',
    ann_file=data_root + 'annotations/lvis_v1_val.json',
    metric=['bbox', 'segm'])
test_evaluator = val_evaluator
