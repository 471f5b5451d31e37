"""Fused float32 CPU kernels for APA / AGLU (optional fast path).

Eager PyTorch needs about six passes over memory with three transcendental
functions each way (softplus alone is exp + log1p); the kernels do the same
math in a single pass over memory, in stages over L1-resident blocks. The
math runs in base 2 (log2(e) goes into the per-channel parameters), and 2^t
and log2(1 + e) are inlined range-limited polynomials (both exponentials
have non-positive arguments, log1p's argument lies in [0, 1]), so the loops
vectorize without a vector math library. A second backward form rebuilds
its input per element from a per-channel (or per-row) affine of one tensor
plus an optional second one, for inputs that were not kept
(:func:`mmact.ops.apa.rebuilt_backward`). The source is compiled for the
host's vector ISA and cached by :mod:`mmact.ops.cpu_build`.

Nothing here is required: when the kernel cannot be built
:func:`get_kernel` returns None and the ops use the plain torch path. The
math is the one of :mod:`mmact.ops.apa`; tests compare both paths.
"""
import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..versions import is_tracing
from .cpu_build import (KernelLibrary, build_library, get_library,
                        load_library, split_ranges)

__all__ = ['get_kernel', 'build_kernel', 'CpuKernel']

_SOURCE = r"""
float log2f(float);

/* 2^t for t <= 0, the form both exponentials below take once the
 * arguments are scaled by log2(e) (done on the parameters, per channel).
 * t = n + r with |r| <= 1/2, then a degree-5 polynomial fitted for relative
 * error (2e-7 in float32). Adding 1.5 * 2^23 rounds t to the integer n and
 * leaves n in the low mantissa bits, from where it goes to the exponent.
 * t below -126 gives 2^-126 (no denormals); NaN stays NaN. */
static inline float exp2_nonpos(float t) {
    const float tc = t < -126.0f ? -126.0f : t;
    union { float f; int32_t i; } m = {tc + 12582912.0f}, scale;
    const float r = tc - (m.f - 12582912.0f);
    const float r2 = r * r;
    const float p = (1.0f + r * 6.9314694e-1f)
                    + r2 * ((2.4022242e-1f + r * 5.5507336e-2f)
                            + r2 * (9.6715083e-3f + r * 1.3264699e-3f));
    scale.i = (m.i + 127) << 23;
    return p * scale.f;
}

/* log2(1 + e) for 0 <= e <= 1 given s = e / (2 + e) <= 1/3:
 * 2 atanh(s) / ln 2 with a cubic in s^2 fitted for relative error (2e-7). */
static inline float log2_1p_from_s(float s) {
    const float s2 = s * s;
    const float s4 = s2 * s2;
    const float p = (2.8853896f + s2 * 0.96193141f)
                    + s4 * (0.57115573f + s2 * 0.4937740f);
    return s * p;
}

/* Values per stage. The element math is one long dependency chain (two
 * exponentials, a division, a logarithm: about 110 cycles for 8 floats),
 * too long for the out-of-order window to overlap enough iterations of a
 * single loop. Split into stages over a block of BLOCK values, with the
 * intermediate values in stack buffers that stay in L1, each loop's chain
 * is short (about a third less time both ways on Zen 3; element results
 * bit for bit the same; 256 was the fastest of 64 to 2048). */
#define BLOCK 256

/* Per-channel constants, in log2 units: a2 = log2(e) a = lnl2 - k2 z. */
typedef struct { float k2, lnl2, ninvl, kinvl; } Params;

static inline Params channel_params(float k, float l) {
    Params p = {k * 1.44269504f, log2f(l), -1.0f / l, k / l};
    return p;
}

/* Stage 1: a2 and e = 2^-|a2| of n values z. */
static inline void stage_exp(Params p, const float* z, int64_t n, float* a2,
                             float* e) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const float a = p.lnl2 - p.k2 * z[j];
        a2[j] = a;
        e[j] = exp2_nonpos(-__builtin_fabsf(a));
    }
}

/* Forward stage 2: log2(eta) = -log2(1 + 2^a2) / l (softplus in base 2). */
static inline void stage_log_eta(Params p, int64_t n, const float* a2,
                                 const float* e, float* log_eta) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const float sp2 = (a2[j] < 0.0f ? 0.0f : a2[j])
                          + log2_1p_from_s(e[j] / (2.0f + e[j]));
        log_eta[j] = sp2 * p.ninvl;
    }
}

/* Backward stage 2: softplus(a) in base 2 and g = sigmoid(a); one division
 * gives both 1/(1+e) and 1/(2+e). */
static inline void stage_sp_g(int64_t n, const float* a2, const float* e,
                              float* sp2, float* g) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const float ej = e[j];
        const float r = 1.0f / ((1.0f + ej) * (2.0f + ej));
        sp2[j] = (a2[j] < 0.0f ? 0.0f : a2[j])
                 + log2_1p_from_s(ej * (1.0f + ej) * r);
        g[j] = (a2[j] >= 0.0f ? 1.0f : ej) * (2.0f + ej) * r;
    }
}

/* x viewed as (outer, C, inner); parameter c = (i / inner) % C. */
#define SEGMENT_LOOP(...)                                                  \
    int64_t i = start;                                                     \
    while (i < end) {                                                      \
        const int64_t c = (i / inner) % C;                                 \
        int64_t seg = (i / inner + 1) * inner;                             \
        if (seg > end) seg = end;                                          \
        const Params p = channel_params(kp[c], lp[c]);                     \
        __VA_ARGS__                                                        \
        i = seg;                                                           \
    }

#define FWD(NAME, Y)                                                       \
void NAME(const float* x, float* y, const float* kp, const float* lp,      \
          int64_t C, int64_t inner, int64_t start, int64_t end,            \
          int64_t t) {                                                     \
    float a2[BLOCK], e[BLOCK], log_eta[BLOCK];                             \
    SEGMENT_LOOP(                                                          \
        for (int64_t b = i; b < seg; b += BLOCK) {                         \
            const int64_t n = b + BLOCK < seg ? BLOCK : seg - b;           \
            const float* zb = x + b;                                       \
            float* yb = y + b;                                             \
            stage_exp(p, zb, n, a2, e);                                    \
            stage_log_eta(p, n, a2, e, log_eta);                           \
            _Pragma("omp simd")                                            \
            for (int64_t j = 0; j < n; ++j) {                              \
                const float z = zb[j], eta = exp2_nonpos(log_eta[j]);      \
                yb[j] = Y;                                                 \
            }                                                              \
        }                                                                  \
    )                                                                      \
}

#define FWD_PARAMS (const float* x, float* y, const float* kp,             \
                    const float* lp, int64_t C, int64_t inner)
#define FWD_ARGS (x, y, kp, lp, C, inner)
FWD(apa_fwd, eta)
FWD(aglu_fwd, z * eta)
MMACT_PARALLEL(apa_fwd, FWD_PARAMS, FWD_ARGS)
MMACT_PARALLEL(aglu_fwd, FWD_PARAMS, FWD_ARGS)

/* Backward of n <= BLOCK values z with output gradients go: writes gx and
 * adds the block's parameter-gradient sums to *dk, *dl:
 *   APA:  gx = go*eta*g*k/l, dk += go*eta*g*z, dl += go*eta*(sp-g)
 *   AGLU: gx = go*eta*(1 + k z g / l), dk += go*eta*g*z^2,
 *         dl += go*eta*z*(sp-g)
 * (the caller scales the kappa sums by 1/l and the lambda sums by 1/l^2). */
#define BWD_BLOCK(NAME, GX, SK, SL)                                        \
static inline void NAME(Params p, const float* zb, const float* go,        \
                        float* gx, int64_t n, double* dk, double* dl) {    \
    float a2[BLOCK], e[BLOCK], sp2[BLOCK], g[BLOCK];                       \
    stage_exp(p, zb, n, a2, e);                                            \
    stage_sp_g(n, a2, e, sp2, g);                                          \
    float sk = 0.0f, sl = 0.0f;                                            \
    _Pragma("omp simd reduction(+:sk,sl)")                                 \
    for (int64_t j = 0; j < n; ++j) {                                      \
        const float z = zb[j], gj = g[j], sp = sp2[j] * 0.69314718f;       \
        const float w = go[j] * exp2_nonpos(sp2[j] * p.ninvl);             \
        const float kinvl = p.kinvl;                                       \
        gx[j] = GX;                                                        \
        sk += SK;                                                          \
        sl += SL;                                                          \
    }                                                                      \
    *dk += sk;                                                             \
    *dl += sl;                                                             \
}
BWD_BLOCK(apa_bwd_block, w * gj * kinvl, w * gj * z, w * (sp - gj))
BWD_BLOCK(aglu_bwd_block, w + kinvl * (w * z * gj), w * z * gj * z,
          w * z * (sp - gj))

#define BWD(NAME, BLOCK_FN)                                                \
void NAME(const float* x, const float* go, float* gx, const float* kp,     \
          const float* lp, int64_t C, int64_t inner, double* acck,         \
          double* accl, int64_t start, int64_t end, int64_t t) {           \
    acck += t * C;                                                         \
    accl += t * C;                                                         \
    SEGMENT_LOOP(                                                          \
        double dk = 0.0, dl = 0.0;                                         \
        for (int64_t b = i; b < seg; b += BLOCK)                           \
            BLOCK_FN(p, x + b, go + b, gx + b,                             \
                     b + BLOCK < seg ? BLOCK : seg - b, &dk, &dl);         \
        acck[c] += dk; accl[c] += dl;                                      \
    )                                                                      \
}

#define BWD_PARAMS (const float* x, const float* go, float* gx,            \
                    const float* kp, const float* lp, int64_t C,           \
                    int64_t inner, double* acck, double* accl)
#define BWD_ARGS (x, go, gx, kp, lp, C, inner, acck, accl)
BWD(apa_bwd, apa_bwd_block)
BWD(aglu_bwd, aglu_bwd_block)
MMACT_PARALLEL(apa_bwd, BWD_PARAMS, BWD_ARGS)
MMACT_PARALLEL(aglu_bwd, BWD_PARAMS, BWD_ARGS)

/* Backward with the input rebuilt per element from the tensors it was
 * computed from, for activations whose input is not kept (memory-lean
 * training: a BN affine, an attention product, a residual add):
 *   z = src * za[r] + zb[c] (+ oth * zd[c] when oth is given),
 * x viewed as (outer, C, inner), c = (i / inner) % C and r = i / inner
 * (za per (outer, C) row: attention weights) or r = c (za_rows = 0).
 * Parameters and their sums are per channel (pc = c) or shared (pc = 0);
 * sums as in BWD, row t of (threads, P) arrays. */

/* zbuf[q - b] = z[q] for q in [b, be), a row (or channel) at a time. */
static inline void rebuild_block(float* zbuf, const float* src,
                                 const float* oth, const float* za,
                                 const float* zb, const float* zd,
                                 int64_t za_rows, int64_t b, int64_t be,
                                 int64_t inner, int64_t C) {
    for (int64_t j = b; j < be;) {
        const int64_t row = j / inner, c = row % C;
        int64_t e = (row + 1) * inner;
        if (e > be) e = be;
        const float a = za[za_rows ? row : c], s = zb[c];
        if (oth) {
            const float d = zd[c];
            _Pragma("omp simd")
            for (int64_t q = j; q < e; ++q)
                zbuf[q - b] = src[q] * a + s + oth[q] * d;
        } else {
            _Pragma("omp simd")
            for (int64_t q = j; q < e; ++q) zbuf[q - b] = src[q] * a + s;
        }
        j = e;
    }
}

/* z is rebuilt a block at a time into a buffer that stays in L1, so the
 * gate loop runs over whole blocks even where rows are short (7 x 7 values
 * in the last ResNet stage). Shared parameters: one segment for the whole
 * range; per-channel parameters: one per row, as BWD. */
#define BWD_REBUILT(NAME, BLOCK_FN)                                        \
void NAME(const float* src, const float* oth, const float* go, float* gx,  \
          const float* za, const float* zb, const float* zd,               \
          int64_t za_rows, const float* kp, const float* lp,               \
          int64_t per_channel, int64_t C, int64_t inner, double* acck,     \
          double* accl, int64_t start, int64_t end, int64_t t) {           \
    float zbuf[BLOCK];                                                     \
    const int64_t P = per_channel ? C : 1;                                 \
    acck += t * P;                                                         \
    accl += t * P;                                                         \
    int64_t i = start;                                                     \
    while (i < end) {                                                      \
        const int64_t pc = per_channel ? (i / inner) % C : 0;              \
        int64_t seg = per_channel ? (i / inner + 1) * inner : end;         \
        if (seg > end) seg = end;                                          \
        const Params p = channel_params(kp[pc], lp[pc]);                   \
        double dk = 0.0, dl = 0.0;                                         \
        for (int64_t b = i; b < seg; b += BLOCK) {                         \
            const int64_t be = b + BLOCK < seg ? b + BLOCK : seg;          \
            rebuild_block(zbuf, src, oth, za, zb, zd, za_rows, b, be,      \
                          inner, C);                                       \
            BLOCK_FN(p, zbuf, go + b, gx + b, be - b, &dk, &dl);           \
        }                                                                  \
        acck[pc] += dk; accl[pc] += dl;                                    \
        i = seg;                                                           \
    }                                                                      \
}

#define BWDR_PARAMS (const float* src, const float* oth, const float* go,  \
                     float* gx, const float* za, const float* zb,          \
                     const float* zd, int64_t za_rows, const float* kp,    \
                     const float* lp, int64_t per_channel, int64_t C,      \
                     int64_t inner, double* acck, double* accl)
#define BWDR_ARGS (src, oth, go, gx, za, zb, zd, za_rows, kp, lp,          \
                   per_channel, C, inner, acck, accl)
BWD_REBUILT(apa_bwd_rebuilt, apa_bwd_block)
BWD_REBUILT(aglu_bwd_rebuilt, aglu_bwd_block)
MMACT_PARALLEL(apa_bwd_rebuilt, BWDR_PARAMS, BWDR_ARGS)
MMACT_PARALLEL(aglu_bwd_rebuilt, BWDR_PARAMS, BWDR_ARGS)

/* Parameter gradients from the per-thread sums acc (2, T, P): kappa's
 * scaled by 1/l, lambda's by 1/l^2, into out (2, P); float64 throughout. */
void param_grads(const double* acc, int64_t T, int64_t P, const float* lp,
                 double* out) {
    for (int64_t c = 0; c < P; ++c) {
        double sk = 0.0, sl = 0.0;
        for (int64_t t = 0; t < T; ++t) {
            sk += acc[t * P + c];
            sl += acc[(T + t) * P + c];
        }
        const double l = lp[c];
        out[c] = sk / l;
        out[P + c] = sl / (l * l);
    }
}
"""

_NAME = 'mmact_apa'
_MIN_PER_THREAD = 1 << 16


def _f32(t: Tensor) -> Tensor:
    """``t`` as contiguous float32 (itself when it already is: the kernels
    only read it, and every skipped dispatch counts on small tensors)."""
    if t.dtype == torch.float32 and t.is_contiguous():
        return t
    return t.detach().to(torch.float32).contiguous()


class CpuKernel:
    """Handle on the compiled library; see module docstring."""

    def __init__(self, lib: KernelLibrary) -> None:
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        for name in ('apa_fwd', 'aglu_fwd'):
            lib.declare(name, [p, p, p, p, i64, i64])
        for name in ('apa_bwd', 'aglu_bwd'):
            lib.declare(name, [p, p, p, p, p, i64, i64, p, p])
        for name in ('apa_bwd_rebuilt', 'aglu_bwd_rebuilt'):
            lib.declare(name,
                        [p, p, p, p, p, p, p, i64, p, p, i64, i64, i64, p, p])
        self._param_grads = lib.lib.param_grads
        self._param_grads.argtypes = [p, i64, i64, p, p]
        self._param_grads.restype = None
        self.lib = lib

    @staticmethod
    def usable(z: Tensor) -> bool:
        """Whether the kernel can evaluate ``z`` (plain float32 CPU data,
        eager mode)."""
        if is_tracing():
            return False  # checked first: tracers reject ``z.layout``
        return (type(z) in (torch.Tensor, torch.nn.Parameter)
                and z.device.type == 'cpu' and z.dtype == torch.float32
                and z.layout == torch.strided)

    @staticmethod
    def _ranges(n: int) -> list:
        return split_ranges(n, _MIN_PER_THREAD, align=64)

    @staticmethod
    def _layout(z: Tensor, channels: int, channel_dim: int) -> Tuple[int, int]:
        if channels == 1:
            return 1, max(z.numel(), 1)
        dim = channel_dim % z.dim()
        inner = 1
        for s in z.shape[dim + 1:]:
            inner *= s
        return channels, inner

    def forward(self, name: str, z: Tensor, k: Tensor, lam: Tensor,
                channel_dim: int) -> Tensor:
        """Forward of ``name`` ('apa' or 'aglu') for float32 ``z``."""
        z, k, lam = z.contiguous(), _f32(k), _f32(lam)
        C, inner = self._layout(z, k.numel(), channel_dim)
        y = torch.empty_like(z)
        n = z.numel()
        if n == 0:
            return y
        args = (z.data_ptr(), y.data_ptr(), k.data_ptr(), lam.data_ptr(), C,
                inner)
        self.lib.launch(f'{name}_fwd', args, self._ranges(n))
        return y

    def backward(self, name: str, z: Tensor, grad_out: Tensor, k: Tensor,
                 lam: Tensor, channel_dim: int):
        """Returns (grad_z, grad_k, grad_l), the parameter gradients of shape
        (C,) in float64 (C = the parameters' size)."""
        z, go, k, lam = z.contiguous(), _f32(grad_out), _f32(k), _f32(lam)
        C, inner = self._layout(z, k.numel(), channel_dim)
        gx = torch.empty_like(z)
        ranges = self._ranges(z.numel())
        acc = torch.zeros(2, max(len(ranges), 1), C, dtype=torch.float64)
        if z.numel():
            args = (z.data_ptr(), go.data_ptr(), gx.data_ptr(), k.data_ptr(),
                    lam.data_ptr(), C, inner, acc[0].data_ptr(),
                    acc[1].data_ptr())
            self.lib.launch(f'{name}_bwd', args, ranges)
        return (gx, *self._finish(acc, lam))

    def _finish(self, acc: Tensor, lam: Tensor) -> Tuple[Tensor, Tensor]:
        """(grad_k, grad_l) from the per-thread sums (one call instead of
        five small torch ops: this runs for every activation of a step)."""
        out = torch.empty(2, acc.shape[2], dtype=torch.float64)
        self._param_grads(acc.data_ptr(), acc.shape[1], acc.shape[2],
                          lam.data_ptr(), out.data_ptr())
        return out[0], out[1]

    def backward_rebuilt(self, name: str, grad_out: Tensor, k: Tensor,
                         lam: Tensor, src: Tensor, scale: Tensor,
                         shift: Tensor, other: Optional[Tensor],
                         other_scale: Tensor):
        """Backward of ``name`` at ``z = src * scale + shift + other *
        other_scale`` (``other`` optional), never materialising ``z``.

        Args:
            name (str): 'apa' or 'aglu'.
            grad_out (Tensor): Gradient of the output, (N, C, ...) float32.
            k, lam (Tensor): Parameters, both 1 value or both C values.
            src, other (Tensor): Float32 tensors of ``grad_out``'s shape
                (``other`` may be None).
            scale (Tensor): C values or N * C values (one per (n, c) row).
            shift, other_scale (Tensor): C values each.

        Returns:
            tuple: ``(grad_z, grad_k, grad_l)`` as for :meth:`backward`.
        """
        src, go = src.contiguous(), grad_out.contiguous()
        other = None if other is None else other.contiguous()
        k, lam = _f32(k), _f32(lam)
        coef = [_f32(t) for t in (scale, shift, other_scale)]
        C, inner = self._layout(src, src.shape[1] if src.dim() > 1 else 1, 1)
        P = k.numel()
        gx = torch.empty_like(src)
        ranges = self._ranges(src.numel())
        acc = torch.zeros(2, max(len(ranges), 1), P, dtype=torch.float64)
        if src.numel():
            args = (src.data_ptr(), 0 if other is None else other.data_ptr(),
                    go.data_ptr(), gx.data_ptr(), coef[0].data_ptr(),
                    coef[1].data_ptr(), coef[2].data_ptr(),
                    int(coef[0].numel() != C), k.data_ptr(), lam.data_ptr(),
                    int(P > 1), C, inner, acc[0].data_ptr(), acc[1].data_ptr())
            self.lib.launch(f'{name}_bwd_rebuilt', args, ranges)
        return (gx, *self._finish(acc, lam))


def build_kernel(isa: Optional[str] = None,
                 cache_dir: Optional[str] = None) -> CpuKernel:
    """Build (or take from the cache) and load the kernel for ``isa``.

    Args:
        isa: one of :data:`mmact.ops.cpu_build.ISAS`; default the host's.
        cache_dir: library cache; default as in :mod:`mmact.ops.cpu_build`.
    """
    return CpuKernel(
        KernelLibrary(
            load_library(*build_library(_NAME, _SOURCE, isa, cache_dir))))


_kernel: Optional[CpuKernel] = None


def get_kernel() -> Optional[CpuKernel]:
    """The kernel for this machine, built on first call, or None."""
    global _kernel
    if _kernel is None:
        lib = get_library(_NAME, _SOURCE)
        _kernel = None if lib is None else CpuKernel(lib)
    return _kernel
