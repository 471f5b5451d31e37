/* Fused float32 CPU kernels for the FleS pixel passes
 * (mmact.ops.fles.cpu). Public entries and their documentation:
 * fles.h. */
#include <stdlib.h>
#include <string.h>

#include "fles.h"
#include "prelude.h"

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

/* Per band of tile rows: rows [i0, i1) of the plane, grid row gr. With
 * one window per row (nw == 1) a band's rows are one contiguous run, which
 * the kernels take in one loop: on small maps (7x7, 4x4) a row alone is
 * shorter than a vector. */
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
static int64_t fles_stats(const float* x, float* ind, float* div,
                          int64_t mode, GEOM_ARGS) {
    /* column buffers only for several windows per row */
    float* col = nw > 1 ? (float*)malloc(2 * W * sizeof(float)) : NULL;
    if (nw > 1 && !col) return -1;
    float* cnt = col ? col + W : NULL;
    BANDS(
        if (nw == 1) {  /* whole rows: the band is one contiguous run */
            const float* xb = x + (p * H + i0) * W;
            const int64_t n = (i1 - i0) * W;
            double s = 0.0, count = 0.0;
            if (mode == 0) {
                _Pragma("omp simd reduction(+:s, count)")
                for (int64_t j = 0; j < n; ++j) {
                    const float v = xb[j];
                    s += v > 0.0f ? v : 0.0f;
                    count += v >= 0.0f ? 1.0 : 0.0;
                }
            } else {
                _Pragma("omp simd reduction(+:s)")
                for (int64_t j = 0; j < n; ++j) s += xb[j];
                count = (double)n;
            }
            const float d = count < 1.0 ? 1.0f : (float)count;
            div[wbase] = d;
            ind[wbase] = (float)(s * (1.0f / d));
            continue;
        }
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
    return 0;
}
MMACT_ENTRY(fles_stats, (const float* x, float* ind, float* div,
                         int64_t mode, GEOM_PARAMS),
            (x, ind, div, mode, GEOM_NAMES))

/* y = k_ve * rho(c k_ho x) * x */
#define APPLY(NAME, RHO)                                                   \
static int64_t NAME(const float* x, float* y, const float* kv,             \
                    const float* ko, float cst, GEOM_ARGS) {               \
    float* rv = nw > 1 ? (float*)malloc(2 * W * sizeof(float)) : NULL;    \
    if (nw > 1 && !rv) return -1;                                          \
    float* ro = rv ? rv + W : NULL;                                        \
    BANDS(                                                                 \
        if (nw == 1) {  /* whole rows: one run, one scale pair */          \
            const int64_t o = (p * H + i0) * W, n = (i1 - i0) * W;         \
            const float sv = kv[wbase], so = cst * ko[wbase];              \
            _Pragma("omp simd")                                            \
            for (int64_t j = 0; j < n; ++j) {                              \
                const float xv = x[o + j];                                 \
                const float u = so * xv;                                   \
                RHO(u)                                                     \
                (void)d;                                                   \
                y[o + j] = sv * r * xv;                                    \
            }                                                              \
            continue;                                                      \
        }                                                                  \
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
    return 0;                                                              \
}                                                                          \
MMACT_ENTRY(NAME, (const float* x, float* y, const float* kv,              \
                   const float* ko, float cst, GEOM_PARAMS),               \
            (x, y, kv, ko, cst, GEOM_NAMES))

/* gx = g k_ve (rho(u) + u rho'(u)); window gradients of the scales
 * g_ve = sum g x rho(u) and g_ho = c k_ve sum g x^2 rho'(u). */
#define GATE_BWD(NAME, RHO)                                                \
static int64_t NAME(const float* x, const float* go, float* gx,            \
                    const float* kv, const float* ko, float cst,           \
                    float* g_ve, float* g_ho, GEOM_ARGS) {                 \
    float* rv = nw > 1 ? (float*)malloc(4 * W * sizeof(float)) : NULL;    \
    if (nw > 1 && !rv) return -1;                                          \
    float* ro = rv ? rv + W : NULL;                                        \
    float* ca = rv ? rv + 2 * W : NULL;                                    \
    float* cb = rv ? rv + 3 * W : NULL;                                    \
    BANDS(                                                                 \
        if (nw == 1) {  /* whole rows: one run, one scale pair */          \
            const int64_t o = (p * H + i0) * W, n = (i1 - i0) * W;         \
            const float sv = kv[wbase], so = cst * ko[wbase];              \
            double sa = 0.0, sb = 0.0;                                     \
            _Pragma("omp simd reduction(+:sa, sb)")                        \
            for (int64_t j = 0; j < n; ++j) {                              \
                const float xv = x[o + j], g = go[o + j];                  \
                const float u = so * xv;                                   \
                RHO(u)                                                     \
                const float gx_ = g * xv;                                  \
                gx[o + j] = g * sv * (r + u * d);                          \
                sa += gx_ * r;                                             \
                sb += gx_ * xv * d;                                        \
            }                                                              \
            g_ve[wbase] = (float)sa;                                       \
            g_ho[wbase] = (float)(sb * (cst * sv));                        \
            continue;                                                      \
        }                                                                  \
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
    return 0;                                                              \
}                                                                          \
MMACT_ENTRY(NAME, (const float* x, const float* go, float* gx,             \
                   const float* kv, const float* ko, float cst,            \
                   float* g_ve, float* g_ho, GEOM_PARAMS),                 \
            (x, go, gx, kv, ko, cst, g_ve, g_ho, GEOM_NAMES))

APPLY(fles_apply_sigmoid, RHO_SIGMOID)
APPLY(fles_apply_erf, RHO_ERF)
APPLY(fles_apply_mish, RHO_MISH)
GATE_BWD(fles_gate_bwd_sigmoid, RHO_SIGMOID)
GATE_BWD(fles_gate_bwd_erf, RHO_ERF)
GATE_BWD(fles_gate_bwd_mish, RHO_MISH)

/* gx += f'(x) g_ind / div of the pixel's window: mode 0 (positive)
 * f' = [x > 0], mode 1 (mean) f' = 1. */
static int64_t fles_ind_bwd(const float* x, float* gx, const float* gind,
                            const float* div, int64_t mode, GEOM_ARGS) {
    float* rq = nw > 1 ? (float*)malloc(W * sizeof(float)) : NULL;
    if (nw > 1 && !rq) return -1;
    BANDS(
        if (nw == 1) {  /* whole rows: one run, one value */
            const int64_t o = (p * H + i0) * W, n = (i1 - i0) * W;
            const float q = gind[wbase] / div[wbase];
            if (mode == 0) {
                _Pragma("omp simd")
                for (int64_t j = 0; j < n; ++j)
                    gx[o + j] += x[o + j] > 0.0f ? q : 0.0f;
            } else {
                _Pragma("omp simd")
                for (int64_t j = 0; j < n; ++j) gx[o + j] += q;
            }
            continue;
        }
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
    return 0;
}
MMACT_ENTRY(fles_ind_bwd, (const float* x, float* gx, const float* gind,
                           const float* div, int64_t mode, GEOM_PARAMS),
            (x, gx, gind, div, mode, GEOM_NAMES))
