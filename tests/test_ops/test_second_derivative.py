"""refuse_second_derivative: same values, None kept, a second derivative
raises with the operation's name."""
import pytest
import torch

from mmact.ops.second_derivative import refuse_second_derivative


def test_values_kept_and_second_derivative_raises():
    g = torch.randn(3)
    out = refuse_second_derivative('the op', (g, None))
    assert out[1] is None
    assert torch.equal(out[0], g) and out[0].requires_grad
    with pytest.raises(
            RuntimeError, match='the op cannot be differentiated twice'):
        out[0].sum().backward()
