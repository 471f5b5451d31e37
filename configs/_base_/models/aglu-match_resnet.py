# The function-preserving swap of a ReLU ResNet (docs/design/swap.md):
# every ReLU of the backbone becomes an AGLU fitted to it. Use as
#   model = dict(backbone=dict(aglu_match, _delete_=True,
#                              backbone=_base_.model.backbone))
# (a variable, not a `model` key, so that it can sit beside a full config
# among the bases).
aglu_match = dict(
    type='ActSwapBackbone',
    act_cfg=dict(type='AGLU'),
    # one AGLU per position of a block (the paper's layout), not one per
    # block
    untie=True,
    # fitted on the first forward, after the checkpoint is loaded; a resumed
    # run keeps its trained values
    match=True)
