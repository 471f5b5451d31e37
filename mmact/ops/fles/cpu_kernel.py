"""Fused float32 CPU kernels for the pixel passes of FleS on tiles.

FleS touches every pixel four times per training step; each pass is one
loop here, for contiguous ``(planes, H, W)`` float32 maps with a
non-overlapping window grid (tiles cut at the border, or one global window):

* ``stats``: per-window sum of relu(x) and count of x >= 0 (``positive``
  indicator) or sum of x (``mean``);
* ``apply``: ``y = k_ve * rho(c k_ho x) * x``;
* ``gate_bwd``: ``dL/dx`` with the scales held fixed, and the window sums
  ``sum g x rho(u)`` and ``sum g x^2 rho'(u)`` (``u = c k_ho x``) that give
  the scale gradients;
* ``ind_bwd``: ``dL/dx += f'(x) q`` with the indicator gradient ``q`` of the
  pixel's window (``f'`` = step function for ``positive``, 1 for ``mean``).

Per-window values are expanded once per band of tile rows into a row of W
floats, so the inner loops run over whole contiguous rows and vectorize;
window sums accumulate per column over a band and are then reduced per
window in double. Gates: sigmoid (``tanh_gate`` is sigmoid with c = 2),
erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7) and tanh(softplus).
The source is built for the host's ISA by :mod:`mmact.ops.cpu_build`.
"""
import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from ...versions import is_tracing
from ..cpu_build import (KernelLibrary, build_library, get_library,
                         load_library, split_ranges)
from .geometry import WindowGeometry

__all__ = ['FleSCpuKernel', 'get_fles_kernel', 'build_fles_kernel']

_SOURCE = r"""
#include <stdlib.h>
#include <string.h>

/* exp(x), x clamped to [-87, 88]: Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2, degree-5 polynomial (relative error 2e-7 in float32). */
static inline float exp_c(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float r = (x - n * 0.693145751953125f)
                    - n * 1.42860676533018738e-06f;
    const float r2 = r * r;  /* Estrin's scheme */
    const float p = (1.0f + r * 9.9999970e-1f)
                    + r2 * ((4.9999151e-1f + r * 1.6667636e-1f)
                            + r2 * (4.1897912e-2f + r * 8.2902974e-3f));
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

/* Gates: RHO(u) sets r (rho) and d (rho'). */
#define RHO_SIGMOID(u)                                                     \
    const float r = 1.0f / (1.0f + exp_c(-(u)));                           \
    const float d = r * (1.0f - r);

/* Phi(u) = 0.5 (1 + erf(u / sqrt 2)), erf by A&S 7.1.26 on |u| / sqrt 2. */
#define RHO_ERF(u)                                                         \
    const float za = __builtin_fabsf(u) * 0.70710678118654752f;            \
    const float t = 1.0f / (1.0f + 0.3275911f * za);                       \
    const float gauss = exp_c(-za * za);                                   \
    float q = 1.061405429f;                                                \
    q = q * t - 1.453152027f;                                              \
    q = q * t + 1.421413741f;                                              \
    q = q * t - 0.284496736f;                                              \
    q = q * t + 0.254829592f;                                              \
    const float half_erfc = 0.5f * q * t * gauss;                          \
    const float r = (u) >= 0.0f ? 1.0f - half_erfc : half_erfc;            \
    const float d = gauss * 0.39894228040143268f;

/* tanh(softplus(u)) = w (w + 2) / (w (w + 2) + 2), w = e^u;
 * derivative (1 - rho^2) sigmoid(u). u is capped at 20 (rho = 1 there). */
#define RHO_MISH(u)                                                        \
    const float w = exp_c((u) < 20.0f ? (u) : 20.0f);                      \
    const float nw2 = w * (w + 2.0f);                                      \
    const float r = nw2 / (nw2 + 2.0f);                                    \
    const float d = (1.0f - r * r) * (w / (1.0f + w));

/* Per band of tile rows: rows [i0, i1) of the plane, grid row gr. */
#define BANDS(...)                                                         \
    for (int64_t p = p0; p < p1; ++p) {                                    \
        for (int64_t gr = 0; gr < nh; ++gr) {                              \
            const int64_t i0 = gr * kh;                                    \
            const int64_t i1 = i0 + kh < H ? i0 + kh : H;                  \
            const int64_t wbase = (p * nh + gr) * nw;                      \
            __VA_ARGS__                                                    \
        }                                                                  \
    }

/* row[j] = scale * v[wbase + j / kw] for the W columns. */
static inline void expand_row(float* row, const float* v, float scale,
                              int64_t W, int64_t kw) {
    for (int64_t j = 0; j < W; ++j) row[j] = scale * v[j / kw];
}

/* out[c] = scale[c] * (sum of col over the columns of window c), summed in
 * double (scale NULL: 1). */
static inline void reduce_cols(float* out, const float* col,
                               const float* scale, int64_t W, int64_t kw,
                               int64_t nw) {
    for (int64_t c = 0; c < nw; ++c) {
        const int64_t j1 = (c + 1) * kw < W ? (c + 1) * kw : W;
        double s = 0.0;
        for (int64_t j = c * kw; j < j1; ++j) s += col[j];
        out[c] = (float)(scale ? s * scale[c] : s);
    }
}

#define GEOM_PARAMS int64_t H, int64_t W, int64_t kh, int64_t kw,        \
                    int64_t nh, int64_t nw
#define GEOM_ARGS GEOM_PARAMS, int64_t p0, int64_t p1, int64_t t
#define GEOM_NAMES H, W, kh, kw, nh, nw

/* Indicator and its divisor per window: mode 0 (positive)
 * ind = sum relu(x) / max(count(x >= 0), 1); mode 1 (mean) ind = mean of x,
 * divisor = window area. */
void fles_stats(const float* x, float* ind, float* div, int64_t mode,
                GEOM_ARGS) {
    float* col = (float*)malloc(2 * W * sizeof(float));
    float* cnt = col + W;
    BANDS(
        memset(col, 0, 2 * W * sizeof(float));
        for (int64_t i = i0; i < i1; ++i) {
            const float* xr = x + (p * H + i) * W;
            if (mode == 0) {
                _Pragma("omp simd")
                for (int64_t j = 0; j < W; ++j) {
                    const float v = xr[j];
                    col[j] += v > 0.0f ? v : 0.0f;
                    cnt[j] += v >= 0.0f ? 1.0f : 0.0f;
                }
            } else {
                _Pragma("omp simd")
                for (int64_t j = 0; j < W; ++j) col[j] += xr[j];
            }
        }
        float* d = div + wbase;
        if (mode == 0) {
            reduce_cols(d, cnt, NULL, W, kw, nw);
        } else {
            for (int64_t c = 0; c < nw; ++c) {
                const int64_t j1 = (c + 1) * kw < W ? (c + 1) * kw : W;
                d[c] = (float)((i1 - i0) * (j1 - c * kw));
            }
        }
        float inv[nw];
        for (int64_t c = 0; c < nw; ++c) {
            if (d[c] < 1.0f) d[c] = 1.0f;
            inv[c] = 1.0f / d[c];
        }
        reduce_cols(ind + wbase, col, inv, W, kw, nw);
    )
    free(col);
}
MMACT_PARALLEL(fles_stats, (const float* x, float* ind, float* div,
                            int64_t mode, GEOM_PARAMS),
               (x, ind, div, mode, GEOM_NAMES))

/* y = k_ve * rho(c k_ho x) * x */
#define APPLY(NAME, RHO)                                                   \
void NAME(const float* x, float* y, const float* kv, const float* ko,      \
          float cst, GEOM_ARGS) {                                          \
    float* rv = (float*)malloc(2 * W * sizeof(float));                     \
    float* ro = rv + W;                                                    \
    BANDS(                                                                 \
        expand_row(rv, kv + wbase, 1.0f, W, kw);                           \
        expand_row(ro, ko + wbase, cst, W, kw);                            \
        for (int64_t i = i0; i < i1; ++i) {                                \
            const float* xr = x + (p * H + i) * W;                         \
            float* yr = y + (p * H + i) * W;                               \
            _Pragma("omp simd")                                            \
            for (int64_t j = 0; j < W; ++j) {                              \
                const float xv = xr[j];                                    \
                const float u = ro[j] * xv;                                \
                RHO(u)                                                     \
                (void)d;                                                   \
                yr[j] = rv[j] * r * xv;                                    \
            }                                                              \
        }                                                                  \
    )                                                                      \
    free(rv);                                                              \
}                                                                          \
MMACT_PARALLEL(NAME, (const float* x, float* y, const float* kv,          \
                      const float* ko, float cst, GEOM_PARAMS),            \
               (x, y, kv, ko, cst, GEOM_NAMES))

/* gx = g k_ve (rho(u) + u rho'(u)); window gradients of the scales
 * g_ve = sum g x rho(u) and g_ho = c k_ve sum g x^2 rho'(u). */
#define GATE_BWD(NAME, RHO)                                                \
void NAME(const float* x, const float* go, float* gx, const float* kv,     \
          const float* ko, float cst, float* g_ve, float* g_ho,            \
          GEOM_ARGS) {                                                     \
    float* rv = (float*)malloc(4 * W * sizeof(float));                     \
    float* ro = rv + W;                                                    \
    float* ca = ro + W;                                                    \
    float* cb = ca + W;                                                    \
    BANDS(                                                                 \
        expand_row(rv, kv + wbase, 1.0f, W, kw);                           \
        expand_row(ro, ko + wbase, cst, W, kw);                            \
        memset(ca, 0, 2 * W * sizeof(float));                              \
        for (int64_t i = i0; i < i1; ++i) {                                \
            const int64_t o = (p * H + i) * W;                             \
            const float* xr = x + o;                                       \
            const float* gr_ = go + o;                                     \
            float* gxr = gx + o;                                           \
            _Pragma("omp simd")                                            \
            for (int64_t j = 0; j < W; ++j) {                              \
                const float xv = xr[j], g = gr_[j];                        \
                const float u = ro[j] * xv;                                \
                RHO(u)                                                     \
                const float gx_ = g * xv;                                  \
                gxr[j] = g * rv[j] * (r + u * d);                          \
                ca[j] += gx_ * r;                                          \
                cb[j] += gx_ * xv * d;                                     \
            }                                                              \
        }                                                                  \
        float kvc[nw];                                                     \
        for (int64_t c = 0; c < nw; ++c) kvc[c] = cst * kv[wbase + c];     \
        reduce_cols(g_ve + wbase, ca, NULL, W, kw, nw);                    \
        reduce_cols(g_ho + wbase, cb, kvc, W, kw, nw);                     \
    )                                                                      \
    free(rv);                                                              \
}                                                                          \
MMACT_PARALLEL(NAME, (const float* x, const float* go, float* gx,         \
                      const float* kv, const float* ko, float cst,         \
                      float* g_ve, float* g_ho, GEOM_PARAMS),              \
               (x, go, gx, kv, ko, cst, g_ve, g_ho, GEOM_NAMES))

APPLY(fles_apply_sigmoid, RHO_SIGMOID)
APPLY(fles_apply_erf, RHO_ERF)
APPLY(fles_apply_mish, RHO_MISH)
GATE_BWD(fles_gate_bwd_sigmoid, RHO_SIGMOID)
GATE_BWD(fles_gate_bwd_erf, RHO_ERF)
GATE_BWD(fles_gate_bwd_mish, RHO_MISH)

/* gx += f'(x) g_ind / div of the pixel's window: mode 0 (positive)
 * f' = [x > 0], mode 1 (mean) f' = 1. */
void fles_ind_bwd(const float* x, float* gx, const float* gind,
                  const float* div, int64_t mode, GEOM_ARGS) {
    float* rq = (float*)malloc(W * sizeof(float));
    BANDS(
        float q[nw];
        for (int64_t c = 0; c < nw; ++c)
            q[c] = gind[wbase + c] / div[wbase + c];
        expand_row(rq, q, 1.0f, W, kw);
        for (int64_t i = i0; i < i1; ++i) {
            const float* xr = x + (p * H + i) * W;
            float* gxr = gx + (p * H + i) * W;
            if (mode == 0) {
                _Pragma("omp simd")
                for (int64_t j = 0; j < W; ++j)
                    gxr[j] += xr[j] > 0.0f ? rq[j] : 0.0f;
            } else {
                _Pragma("omp simd")
                for (int64_t j = 0; j < W; ++j) gxr[j] += rq[j];
            }
        }
    )
    free(rq);
}
MMACT_PARALLEL(fles_ind_bwd, (const float* x, float* gx, const float* gind,
                              const float* div, int64_t mode, GEOM_PARAMS),
               (x, gx, gind, div, mode, GEOM_NAMES))
"""

_NAME = 'mmact_fles'
_MIN_PER_THREAD = 1 << 15
#: gate -> (C function suffix, constant c with rho(z) = base(c z)).
_GATES = {
    'sigmoid': ('sigmoid', 1.0),
    'tanh_gate': ('sigmoid', 2.0),
    'erf': ('erf', 1.0),
    'tanh_softplus': ('mish', 1.0),
}
#: indicator modes the kernel evaluates (others: torch).
_MODES = {'positive': 0, 'mean': 1}


def _ptr(t: Tensor) -> int:
    return t.data_ptr()


class FleSCpuKernel:
    """ctypes wrapper of the FleS pixel passes (see the module docstring).

    All tensors are contiguous float32 on the CPU: maps ``(planes, H, W)``,
    per-window values ``(planes, nh, nw)``.

    Args:
        lib: the loaded library.
    """

    def __init__(self, lib: KernelLibrary) -> None:
        p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        geom = [i64] * 6
        lib.declare('fles_stats', [p, p, p, i64] + geom)
        lib.declare('fles_ind_bwd', [p, p, p, p, i64] + geom)
        for suffix in ('sigmoid', 'erf', 'mish'):
            lib.declare(f'fles_apply_{suffix}', [p, p, p, p, f32] + geom)
            lib.declare(f'fles_gate_bwd_{suffix}',
                        [p, p, p, p, p, f32, p, p] + geom)
        self.lib = lib

    @staticmethod
    def usable(x: Tensor, geom: WindowGeometry) -> bool:
        """Whether the kernel evaluates FleS passes on ``x`` with ``geom``."""
        if is_tracing():
            return False
        return (type(x) in (torch.Tensor, torch.nn.Parameter)
                and x.device.type == 'cpu' and x.dtype == torch.float32
                and not geom.overlapping)

    @staticmethod
    def supports_gate(gate: str) -> bool:
        return gate in _GATES

    @staticmethod
    def supports_mode(mode: str) -> bool:
        return mode in _MODES

    def _run(self, name: str, planes: int, geom: WindowGeometry,
             args: tuple) -> None:
        h, w = geom.height, geom.width
        ranges = split_ranges(planes, max(1, _MIN_PER_THREAD // (h * w)))
        self.lib.launch(name, args + (h, w, *geom.window, *geom.grid), ranges)

    def stats(self, xf: Tensor, geom: WindowGeometry,
              mode: str) -> Tuple[Tensor, Tensor]:
        """``(ind, div)``, each ``(planes, nh, nw)``: the indicator and its
        divisor (count of ``x >= 0`` floored at 1 for ``positive``, window
        area for ``mean``)."""
        ind = xf.new_empty(xf.shape[0], *geom.grid)
        div = torch.empty_like(ind)
        self._run('fles_stats', xf.shape[0], geom,
                  (_ptr(xf), _ptr(ind), _ptr(div), _MODES[mode]))
        return ind, div

    def apply(self, xf: Tensor, kv: Tensor, ko: Tensor, geom: WindowGeometry,
              gate: str) -> Tensor:
        """``k_ve * rho(k_ho x) * x`` with per-window scales."""
        suffix, cst = _GATES[gate]
        out = torch.empty_like(xf)
        kv, ko = kv.contiguous(), ko.contiguous()
        self._run(f'fles_apply_{suffix}', xf.shape[0], geom,
                  (_ptr(xf), _ptr(out), _ptr(kv), _ptr(ko), cst))
        return out

    def gate_backward(self, xf: Tensor, gf: Tensor, kv: Tensor, ko: Tensor,
                      geom: WindowGeometry,
                      gate: str) -> Tuple[Tensor, Tensor, Tensor]:
        """Returns ``(grad_x, g_ve, g_ho)``: the input gradient with the
        scales held fixed, and the gradients of the per-window scales."""
        suffix, cst = _GATES[gate]
        kv, ko = kv.contiguous(), ko.contiguous()
        grad_x = torch.empty_like(xf)
        g_ve, g_ho = torch.empty_like(kv), torch.empty_like(kv)
        self._run(f'fles_gate_bwd_{suffix}', xf.shape[0], geom,
                  (_ptr(xf), _ptr(gf), _ptr(grad_x), _ptr(kv), _ptr(ko), cst,
                   _ptr(g_ve), _ptr(g_ho)))
        return grad_x, g_ve, g_ho

    def indicator_backward(self, xf: Tensor, grad_x: Tensor, g_ind: Tensor,
                           div: Tensor, geom: WindowGeometry,
                           mode: str) -> None:
        """``grad_x += f'(x) * g_ind / div`` of each pixel's window, in
        place (``div`` from :meth:`stats`)."""
        g_ind = g_ind.to(torch.float32).contiguous()
        self._run(
            'fles_ind_bwd', xf.shape[0], geom,
            (_ptr(xf), _ptr(grad_x), _ptr(g_ind), _ptr(div), _MODES[mode]))


def build_fles_kernel(isa: Optional[str] = None,
                      cache_dir: Optional[str] = None) -> FleSCpuKernel:
    """Build (or take from the cache) and load the kernel for ``isa``.

    Args:
        isa: one of :data:`mmact.ops.cpu_build.ISAS`; default the host's.
        cache_dir: library cache; default as in :mod:`mmact.ops.cpu_build`.
    """
    return FleSCpuKernel(
        KernelLibrary(
            load_library(*build_library(_NAME, _SOURCE, isa, cache_dir))))


_kernel: Optional[FleSCpuKernel] = None


def get_fles_kernel() -> Optional[FleSCpuKernel]:
    """The kernel for this machine, built on first call, or None."""
    global _kernel
    if _kernel is None:
        lib = get_library(_NAME, _SOURCE)
        _kernel = None if lib is None else FleSCpuKernel(lib)
    return _kernel
