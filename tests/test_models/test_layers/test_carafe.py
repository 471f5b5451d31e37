"""CARAFEUpsample: mmcv's CARAFEPack, same parameters, on every device."""
import pytest
import torch
import torch.nn.functional as F
from mmcv.ops.carafe import CARAFEPack

from mmact.models.layers.carafe import CARAFEUpsample
from mmact.ops.carafe import carafe_torch, mmcv_cuda_carafe

ARGS = dict(
    channels=16,
    scale_factor=2,
    up_kernel=5,
    up_group=2,
    encoder_kernel=3,
    encoder_dilation=1,
    compressed_channels=8)


def test_same_parameters_as_mmcv_carafe_pack():
    ours, mmcv = CARAFEUpsample(**ARGS), CARAFEPack(**ARGS)
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in mmcv.state_dict().items()}
    ours.load_state_dict(mmcv.state_dict(), strict=True)


def test_cpu_forward_is_the_pack_with_the_exact_reassembly():
    torch.manual_seed(0)
    layer = CARAFEUpsample(**ARGS).double()
    x = torch.randn(2, 16, 5, 6, dtype=torch.float64)
    kernels = F.pixel_shuffle(
        layer.content_encoder(layer.channel_compressor(x)), 2)
    kernels = kernels.view(2, 2, 25, 10, 12).softmax(2).view(2, 50, 10, 12)
    torch.testing.assert_close(layer(x), carafe_torch(x, kernels, 5, 2, 2))
    with pytest.raises(RuntimeError, match='cpu'):  # what this layer fixes
        CARAFEPack(**ARGS)(x.float())


@pytest.mark.skipif(
    not torch.cuda.is_available() or mmcv_cuda_carafe() is None,
    reason='needs a GPU and mmcv built with CUDA ops')
def test_cuda_output_equals_mmcv():
    torch.manual_seed(0)
    mmcv = CARAFEPack(**ARGS).cuda()
    ours = CARAFEUpsample(**ARGS).cuda()
    ours.load_state_dict(mmcv.state_dict())
    x = torch.randn(4, 16, 14, 14, device='cuda')
    torch.testing.assert_close(ours(x), mmcv(x))
