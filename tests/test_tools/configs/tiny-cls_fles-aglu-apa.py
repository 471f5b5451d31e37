# tiny-cls_aglu-apa.py with FleS at every activation position of the
# backbone and AGLU inside the APA* attention (between its two linear
# layers): AGLU, APA and FleS in one model. FleS layers take their channel
# count from a dry run (MaterializedModel).
_base_ = ['./tiny-cls_aglu-apa.py']

model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 32, 32),
    model=dict(
        _base_.model,
        backbone=dict(
            _base_.model.backbone,
            act_cfg=dict(type='FleS', reduction=4),
            attention_cfg=dict(
                type='APASELayer', ratio=4, act_cfg=dict(type='AGLU')))))
