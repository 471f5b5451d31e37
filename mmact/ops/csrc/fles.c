/* Fused float32 CPU kernels for the FleS pixel passes
 * (mmact.ops.fles.cpu). Public entries and their documentation:
 * fles.h. */
#include <stdlib.h>
#include <string.h>

#include "fles.h"
#include "fles_math.h"
#include "prelude.h"

/* A pixel's gate backward given its gate value and slope q: the input
 * gradient with the scales held fixed and its terms of the window sums.
 * A function, so that the vector loops hold no FlesRho they pass on: g++
 * takes the address of a named struct passed by value, and under
 * `omp simd` an addressed local becomes a per-lane array in memory, which
 * keeps the loop scalar. */
typedef struct { float gx; FlesSums t; } FlesGatePixel;

static inline FlesGatePixel gate_pixel(FlesRho q, float g, float sv,
                                       float u, float x) {
    const FlesGatePixel out = {fles_gate_grad(g, sv, u, q),
                               fles_scale_terms(g, x, q)};
    return out;
}

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
                    s += fles_ind_term(0, v);
                    count += fles_ind_count(v);
                }
            } else {
                _Pragma("omp simd reduction(+:s)")
                for (int64_t j = 0; j < n; ++j) s += xb[j];
                count = (double)n;
            }
            const float d = fles_divisor((float)count);
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
                    col[j] += fles_ind_term(0, v);
                    cnt[j] += fles_ind_count(v);
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
            d[c] = fles_divisor(d[c]);
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
                y[o + j] = fles_output(sv, RHO(u).r, xv);                  \
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
                yr[j] = fles_output(rv[j], RHO(u).r, xv);                  \
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
                const FlesGatePixel q_ = gate_pixel(RHO(u), g, sv, u, xv); \
                gx[o + j] = q_.gx;                                         \
                sa += q_.t.sa;                                             \
                sb += q_.t.sb;                                             \
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
                const FlesGatePixel q_ =                                   \
                    gate_pixel(RHO(u), g, rv[j], u, xv);                   \
                gxr[j] = q_.gx;                                            \
                ca[j] += q_.t.sa;                                          \
                cb[j] += q_.t.sb;                                          \
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

/* The passes per gate: RHO is the gate's function in fles_math.h. */
APPLY(fles_apply_sigmoid, fles_rho_sigmoid)
APPLY(fles_apply_erf, fles_rho_erf)
APPLY(fles_apply_mish, fles_rho_mish)
GATE_BWD(fles_gate_bwd_sigmoid, fles_rho_sigmoid)
GATE_BWD(fles_gate_bwd_erf, fles_rho_erf)
GATE_BWD(fles_gate_bwd_mish, fles_rho_mish)

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
                    gx[o + j] += fles_ind_grad(0, x[o + j], q);
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
                    gxr[j] += fles_ind_grad(0, xr[j], rq[j]);
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
