"""Window geometry of FleS: the grid of reference regions on a map.

Windows start at ``0, s, 2s, ...`` along each axis; there are
``n = ceil((H - k) / s) + 1`` of them, so the grid always covers the map.
Windows that run past the border are cut at the border and use their own
element counts (no padding values are ever counted). Everything is pooling,
gathers or transposed convolution over the whole tensor: no Python loop over
windows.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    'WindowGeometry', 'check_window_args', 'grid_window', 'window_geometry',
    'window_sum', 'window_scatter', 'window_coverage', 'window_area',
    'window_expand'
]


def _pair(value, name: str) -> Tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (not isinstance(value, (tuple, list)) or len(value) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise TypeError(f'{name} must be an int or a pair of ints, '
                        f'got {value!r}')
    if min(value) <= 0:
        raise ValueError(f'{name} must be positive, got {tuple(value)}')
    return int(value[0]), int(value[1])


def check_window_args(
        window_size,
        stride) -> Tuple[Optional[Tuple[int, int]], Optional[Tuple[int, int]]]:
    """Validate ``window_size`` / ``stride`` (construction-time checks).

    ``stride`` needs a ``window_size`` and may not exceed it (a larger stride
    would leave pixels without a window).

    Args:
        window_size: None (whole map), an int or a pair of ints.
        stride: None (equal to the window), an int or a pair of ints.

    Returns:
        The normalised ``(window, stride)`` pairs (both None for the whole
        map).
    """
    if window_size is None:
        if stride is not None:
            raise ValueError(f'stride={stride!r} needs a window_size; '
                             'window_size=None uses the whole map')
        return None, None
    window = _pair(window_size, 'window_size')
    if stride is None:
        return window, window
    step = _pair(stride, 'stride')
    if step[0] > window[0] or step[1] > window[1]:
        raise ValueError(f'stride {step} must not exceed window_size '
                         f'{window}: pixels between windows would have no '
                         'scale')
    return window, step


def grid_window(height: int, width: int, grid) -> Tuple[int, int]:
    """Window size that tiles a map into at most ``grid`` windows.

    The window is ``(ceil(H / gh), ceil(W / gw))``: the same fraction of every
    map, whatever its stride. The last window of a row or column may be cut
    at the border, and a map smaller than the grid gets one-pixel windows.

    Args:
        height: map height.
        width: map width.
        grid: ``(gh, gw)`` windows (an int means ``(g, g)``).

    Returns:
        The window ``(kh, kw)``.
    """
    gh, gw = _pair(grid, 'window_grid')
    return -(-height // gh), -(-width // gw)


@dataclass(frozen=True)
class WindowGeometry:
    """A window grid on an ``height x width`` map.

    Attributes:
        height, width: map size.
        window: effective ``(kh, kw)`` (after clamping to the map).
        stride: effective ``(sh, sw)``.
        grid: number of windows ``(nh, nw)``.
        clamped: whether the requested window was larger than the map.
    """
    height: int
    width: int
    window: Tuple[int, int]
    stride: Tuple[int, int]
    grid: Tuple[int, int]
    clamped: bool = False

    @property
    def is_global(self) -> bool:
        return self.grid == (1, 1) and self.window == (self.height, self.width)

    @property
    def overlapping(self) -> bool:
        return self.stride != self.window and not self.is_global


def window_geometry(height: int,
                    width: int,
                    window_size=None,
                    stride=None) -> WindowGeometry:
    """Window grid for a map (``window_size=None``: one global window).

    A window larger than the map is clamped to the map size (the result has
    ``clamped=True`` so callers can warn); the stride is clamped to the
    clamped window.

    Args:
        height: map height.
        width: map width.
        window_size: see :func:`check_window_args`.
        stride: see :func:`check_window_args`.

    Returns:
        The :class:`WindowGeometry`.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f'empty feature map {height}x{width}')
    window, step = check_window_args(window_size, stride)
    if window is None:
        return WindowGeometry(height, width, (height, width), (height, width),
                              (1, 1))
    kh, kw = min(window[0], height), min(window[1], width)
    clamped = (kh, kw) != window
    sh, sw = min(step[0], kh), min(step[1], kw)
    nh = -(-(height - kh) // sh) + 1
    nw = -(-(width - kw) // sw) + 1
    return WindowGeometry(height, width, (kh, kw), (sh, sw), (nh, nw), clamped)


def window_sum(v: Tensor, geom: WindowGeometry) -> Tensor:
    """Sum of ``v`` over every window: ``(..., H, W) -> (..., nh, nw)``.

    Border windows sum only their in-map elements.

    Args:
        v: 3-D ``(n, H, W)`` or 4-D ``(N, C, H, W)``.
        geom: the window grid.
    """
    if geom.is_global:
        return v.sum(dim=(-2, -1), keepdim=True)
    return F.avg_pool2d(
        v, geom.window, geom.stride, ceil_mode=True, divisor_override=1)


def window_scatter(k: Tensor, geom: WindowGeometry) -> Tensor:
    """Sum over all windows covering a pixel: ``(..., nh, nw) -> (..., H, W)``.

    This is the adjoint of :func:`window_sum`. For tiles it is a gather
    (nearest upsampling, cropped to the map); for overlapping windows it is a
    transposed convolution with a ones kernel.

    Args:
        k: ``(n, nh, nw)`` or ``(N, C, nh, nw)``.
        geom: the window grid.
    """
    if geom.is_global:
        return k.expand(*k.shape[:-2], geom.height, geom.width)
    lead = k.shape[:-2]
    if not geom.overlapping:
        kh, kw = geom.window
        rows = torch.arange(geom.height, device=k.device) // kh
        cols = torch.arange(geom.width, device=k.device) // kw
        index = (rows[:, None] * geom.grid[1] + cols[None, :]).reshape(-1)
        flat = k.reshape(-1, geom.grid[0] * geom.grid[1])
        out = flat.index_select(1, index)
        return out.view(*lead, geom.height, geom.width)
    kh, kw = geom.window
    ones = k.new_ones(1, 1, kh, kw)
    out = F.conv_transpose2d(
        k.reshape(-1, 1, *geom.grid), ones, stride=geom.stride)
    out = out[..., :geom.height, :geom.width]
    return out.reshape(*lead, geom.height, geom.width)


def window_coverage(geom: WindowGeometry,
                    device=None,
                    dtype=torch.float32) -> Tensor:
    """Number of windows covering each pixel, ``(H, W)``."""
    ones = torch.ones(1, *geom.grid, device=device, dtype=dtype)
    return window_scatter(ones, geom)[0]


def window_area(geom: WindowGeometry,
                device=None,
                dtype=torch.float32) -> Tensor:
    """Number of in-map pixels of each window, ``(nh, nw)``."""
    ones = torch.ones(1, geom.height, geom.width, device=device, dtype=dtype)
    return window_sum(ones, geom)[0]


def window_expand(k: Tensor, geom: WindowGeometry) -> Tensor:
    """Per-pixel value of window quantities ``(..., nh, nw) -> (..., H, W)``.

    Each pixel gets the value of its window; with overlapping windows the
    average over all windows covering it.

    Args:
        k: ``(n, nh, nw)`` or ``(N, C, nh, nw)``.
        geom: the window grid.
    """
    out = window_scatter(k, geom)
    if geom.overlapping:
        out = out / window_coverage(geom, k.device, k.dtype)
    return out
