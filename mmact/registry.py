"""Where mmact components are registered.

Registration is by decorator, in the registry of the codebase a component
belongs to:

- mmengine's root ``MODELS`` / ``HOOKS`` / ``METRICS``: activations,
  attention layers and the hooks and metrics any codebase can use. Child
  registries (mmdet, mmpretrain, mmseg, ...) search their parent, so
  ``act_cfg=dict(type='AGLU')`` resolves under any default scope.
- ``mmdet.registry`` / ``mmpretrain.registry``: parts built on those
  codebases' classes. A name never resolves in a sibling registry, so
  ``ActResNet`` is registered in both.
"""
