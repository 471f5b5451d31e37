"""Broadcast per-window values over tiles without materialising them."""
from typing import Optional

import torch
from torch import Tensor

from .geometry import WindowGeometry, window_sum

__all__ = ['Tiling', 'window_dot']


class Tiling:
    """Broadcast per-window values over pixels of a tile (or global) grid.

    The window grid ``(n, nh, nw)`` is first expanded along the columns only
    (``(n, nh, W)``, small), then a ``(n, H, W)`` block is viewed per band of
    tile rows as ``(n, th, eh, W)`` against ``(n, th, 1, W)``: one
    broadcasting kernel per band (full tile rows, then the cut bottom row),
    contiguous inner loop.

    Args:
        geom: a non-overlapping window grid.
    """

    def __init__(self, geom: WindowGeometry):
        kh, kw = geom.window
        qh, rh = divmod(geom.height, kh)
        self.kw, self.width = kw, geom.width
        self.is_global = geom.is_global
        self.bands = []  # (pixel rows, (tiles, tile height), grid rows)
        if qh:
            self.bands.append((slice(0, qh * kh), (qh, kh), slice(0, qh)))
        if rh:
            self.bands.append((slice(qh * kh,
                                     geom.height), (1, rh), slice(qh, qh + 1)))

    def _expand_cols(self, k: Tensor) -> Tensor:
        if self.is_global:
            return k  # (n, 1, 1) broadcasts over (n, 1, H, W) views
        n, nh, nw = k.shape
        wide = k[..., None].expand(n, nh, nw,
                                   self.kw).reshape(n, nh, nw * self.kw)
        return wide[..., :self.width]

    def mul(self, t: Tensor, k: Tensor, out: Tensor) -> Tensor:
        """``out = t * expand(k)`` (``out`` may be ``t``)."""
        kc = self._expand_cols(k)
        for rows, shape, grid_rows in self.bands:
            torch.mul(
                t[:, rows].unflatten(1, shape),
                kc[:, grid_rows, None],
                out=out[:, rows].unflatten(1, shape))
        return out

    def addcmul_(self, out: Tensor, t: Optional[Tensor], k: Tensor) -> Tensor:
        """``out += t * expand(k)`` (``t=None``: ``out += expand(k)``)."""
        kc = self._expand_cols(k)
        for rows, shape, grid_rows in self.bands:
            view = out[:, rows].unflatten(1, shape)
            if t is None:
                view.add_(kc[:, grid_rows, None])
            else:
                view.addcmul_(t[:, rows].unflatten(1, shape), kc[:, grid_rows,
                                                                 None])
        return out


def window_dot(a: Tensor, b: Tensor, geom: WindowGeometry) -> Tensor:
    """Window sums of ``a * b`` for 3-D blocks (global: no temporary)."""
    if geom.is_global:
        n = a.shape[0]
        return torch.linalg.vecdot(a.reshape(n, -1),
                                   b.reshape(n, -1)).view(n, 1, 1)
    return window_sum(a * b, geom)
