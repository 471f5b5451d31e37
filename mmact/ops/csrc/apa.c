/* Fused float32 CPU kernels for APA / AGLU (mmact.ops.apa_cpu_kernel).
 * Public entries and their documentation: apa.h. */
#include <math.h>
#include <stdlib.h>

#include "apa.h"
#include "prelude.h"

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

/* Values per thread below which fewer threads are used. */
#define MIN_PER_THREAD (1 << 16)

/* Per-channel constants, in log2 units: a2 = log2(e) a = lnl2 - k2 z;
 * lambda clamped to lmin from below (the clamp of mmact.ops.apa). */
typedef struct { float k2, lnl2, ninvl, kinvl; } Params;

static inline Params channel_params(float k, float l, float lmin) {
    l = l > lmin ? l : lmin;
    Params p = {k * 1.44269504f, log2f(l), -1.0f / l, k / l};
    return p;
}

/* Each channel's constants computed once per range (a logarithm and two
 * divisions, as much as a short row's math), in a direct-mapped table. */
#define PARAM_SLOTS 256
typedef struct {
    const float *kp, *lp;
    float lmin;
    Params p[PARAM_SLOTS];
    int64_t channel[PARAM_SLOTS];
} ParamTable;

static inline void table_init(ParamTable* t, const float* kp,
                              const float* lp, float lmin, int64_t P) {
    t->kp = kp;
    t->lp = lp;
    t->lmin = lmin;
    const int64_t n = P < PARAM_SLOTS ? P : PARAM_SLOTS;
    for (int64_t s = 0; s < n; ++s) t->channel[s] = -1;
}

static inline Params table_get(ParamTable* t, int64_t c) {
    const int64_t s = c % PARAM_SLOTS;
    if (t->channel[s] != c) {
        t->p[s] = channel_params(t->kp[c], t->lp[c], t->lmin);
        t->channel[s] = c;
    }
    return t->p[s];
}

/* A range's position: x viewed as (outer, P, inner), the current row's end
 * and parameter index (counted from row to row, not divided). */
typedef struct { int64_t end, c; } Cursor;

static inline Cursor cursor_at(int64_t i, int64_t P, int64_t inner) {
    const int64_t row = i / inner;
    Cursor u = {(row + 1) * inner, row % P};
    return u;
}

/* Moves the cursor to the next row when the current one ends at be. */
static inline void cursor_step(Cursor* u, int64_t be, int64_t P,
                               int64_t inner) {
    if (u->end == be) {
        u->end += inner;
        if (++u->c == P) u->c = 0;
    }
}

/* A block [b, be) of at most BLOCK values runs one of two ways. Inside one
 * row (shared parameters, rows of a block or more) with that row's
 * constants (the *_row functions). Across several rows (4 x 4 maps,
 * channels-last tokens, where a row is one value) with the constants laid
 * out per value: block_rows writes a2 = lnl2 - k2 z, nl = -1/l and
 * ki = k/l of each value's row, and the rows' parameter indices and ends
 * (relative to b) to seg_c, seg_end, and returns the row count; the stages
 * then run over the whole block however short the rows (per row they
 * would cost about twice as much at 4 x 4; per value throughout, long rows
 * would cost a fifth more). */
static inline int64_t block_rows(ParamTable* t, Cursor* u, int64_t P,
                                 int64_t inner, const float* z, int64_t b,
                                 int64_t be, float* a2, float* nl, float* ki,
                                 int64_t* seg_c, int64_t* seg_end) {
    int64_t rows = 0;
    for (int64_t j = b; j < be;) {
        const int64_t e = u->end < be ? u->end : be;
        const Params p = table_get(t, u->c);
        _Pragma("omp simd")
        for (int64_t q = j - b; q < e - b; ++q) {
            a2[q] = p.lnl2 - p.k2 * z[q];
            nl[q] = p.ninvl;
            ki[q] = p.kinvl;
        }
        seg_c[rows] = u->c;
        seg_end[rows++] = e - b;
        cursor_step(u, e, P, inner);
        j = e;
    }
    return rows;
}

/* Stage 1: a2 (from z in one row, given across rows) and e = 2^-|a2|. */
static inline void stage_exp_row(Params p, const float* z, int64_t n,
                                 float* a2, float* e) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const float a = p.lnl2 - p.k2 * z[j];
        a2[j] = a;
        e[j] = exp2_nonpos(-__builtin_fabsf(a));
    }
}

static inline void stage_exp(int64_t n, const float* a2, float* e) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) e[j] = exp2_nonpos(-__builtin_fabsf(a2[j]));
}

/* Forward stage 2: log2(eta) = -log2(1 + 2^a2) / l (softplus in base 2),
 * with -1/l as NL. */
#define STAGE_LOG_ETA(NAME, NL_ARG, NL)                                    \
static inline void NAME(int64_t n, const float* a2, const float* e,        \
                        NL_ARG, float* log_eta) {                          \
    _Pragma("omp simd")                                                    \
    for (int64_t j = 0; j < n; ++j) {                                      \
        const float sp2 = (a2[j] < 0.0f ? 0.0f : a2[j])                    \
                          + log2_1p_from_s(e[j] / (2.0f + e[j]));          \
        log_eta[j] = sp2 * (NL);                                           \
    }                                                                      \
}
STAGE_LOG_ETA(stage_log_eta_row, float ninvl, ninvl)
STAGE_LOG_ETA(stage_log_eta, const float* nl, nl[j])

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

/* Forward over [start, end), a block at a time. */
#define FWD(NAME, Y)                                                       \
static void NAME(const float* x, float* y, const float* kp,                \
                 const float* lp, float lmin, int64_t C, int64_t inner,    \
                 int64_t start, int64_t end) {                             \
    float a2[BLOCK], nl[BLOCK], ki[BLOCK], e[BLOCK], log_eta[BLOCK];       \
    int64_t seg_c[BLOCK], seg_end[BLOCK];                                  \
    ParamTable table;                                                      \
    table_init(&table, kp, lp, lmin, C);                                   \
    Cursor u = cursor_at(start, C, inner);                                 \
    for (int64_t b = start; b < end; b += BLOCK) {                         \
        const int64_t n = b + BLOCK < end ? BLOCK : end - b;               \
        const float* zb = x + b;                                           \
        float* yb = y + b;                                                 \
        if (u.end >= b + n) {                                              \
            const Params p = table_get(&table, u.c);                       \
            stage_exp_row(p, zb, n, a2, e);                                \
            stage_log_eta_row(n, a2, e, p.ninvl, log_eta);                 \
            cursor_step(&u, b + n, C, inner);                              \
        } else {                                                           \
            block_rows(&table, &u, C, inner, zb, b, b + n, a2, nl, ki,     \
                       seg_c, seg_end);                                    \
            stage_exp(n, a2, e);                                           \
            stage_log_eta(n, a2, e, nl, log_eta);                          \
        }                                                                  \
        _Pragma("omp simd")                                                \
        for (int64_t j = 0; j < n; ++j) {                                  \
            const float z = zb[j], eta = exp2_nonpos(log_eta[j]);          \
            (void)z;                                                       \
            yb[j] = Y;                                                     \
        }                                                                  \
    }                                                                      \
}

FWD(apa_fwd_range, eta)
FWD(aglu_fwd_range, z * eta)

/* Backward of a block of n <= BLOCK values z with output gradients go:
 * writes gx and the terms of the parameter-gradient sums
 *   APA:  gx = go*eta*g*k/l, sk = go*eta*g*z, sl = go*eta*(sp-g)
 *   AGLU: gx = go*eta*(1 + k z g / l), sk = go*eta*g*z^2,
 *         sl = go*eta*z*(sp-g)
 * (the kappa sums are scaled by 1/l and the lambda sums by 1/l^2 at the
 * end, param_grads): NAME_row inside one row (its sums added to *dk, *dl),
 * NAME across rows (a2, nl, ki from block_rows; each value's terms to sk,
 * sl, summed per row by add_row_sums). */
#define BWD_TERMS(NL, KI)                                                  \
    const float z = zb[j], gj = g[j], sp = sp2[j] * 0.69314718f;           \
    const float w = go[j] * exp2_nonpos(sp2[j] * (NL));                    \
    const float kinvl = (KI);

#define BWD_BLOCK(NAME, GX, SK, SL)                                        \
static inline void NAME##_row(Params p, const float* zb, const float* go,  \
                              float* gx, int64_t n, double* dk,            \
                              double* dl) {                                \
    float a2[BLOCK], e[BLOCK], sp2[BLOCK], g[BLOCK];                       \
    stage_exp_row(p, zb, n, a2, e);                                        \
    stage_sp_g(n, a2, e, sp2, g);                                          \
    float sk = 0.0f, sl = 0.0f;                                            \
    _Pragma("omp simd reduction(+:sk,sl)")                                 \
    for (int64_t j = 0; j < n; ++j) {                                      \
        BWD_TERMS(p.ninvl, p.kinvl)                                        \
        gx[j] = GX;                                                        \
        sk += SK;                                                          \
        sl += SL;                                                          \
    }                                                                      \
    *dk += sk;                                                             \
    *dl += sl;                                                             \
}                                                                          \
static inline void NAME(const float* a2, const float* nl, const float* ki, \
                        const float* zb, const float* go, float* gx,       \
                        int64_t n, float* sk, float* sl) {                 \
    float e[BLOCK], sp2[BLOCK], g[BLOCK];                                  \
    stage_exp(n, a2, e);                                                   \
    stage_sp_g(n, a2, e, sp2, g);                                          \
    _Pragma("omp simd")                                                    \
    for (int64_t j = 0; j < n; ++j) {                                      \
        BWD_TERMS(nl[j], ki[j])                                            \
        gx[j] = GX;                                                        \
        sk[j] = SK;                                                        \
        sl[j] = SL;                                                        \
    }                                                                      \
}
BWD_BLOCK(apa_bwd_block, w * gj * kinvl, w * gj * z, w * (sp - gj))
BWD_BLOCK(aglu_bwd_block, w + kinvl * (w * z * gj), w * z * gj * z,
          w * z * (sp - gj))

/* Adds the rows' sums of sk, sl to their parameters' acck, accl: over 16
 * lanes, then the lanes pairwise (compiled as a reduction, a row of 16
 * became 16 dependent scalar additions, more than the row's math). */
#define LANES 16
static inline void add_row_sums(const float* sk, const float* sl,
                                int64_t rows, const int64_t* seg_c,
                                const int64_t* seg_end, double* acck,
                                double* accl) {
    int64_t j = 0;
    for (int64_t r = 0; r < rows; ++r) {
        float lk[LANES] = {0.0f}, ll[LANES] = {0.0f};
        const int64_t e = seg_end[r];
        for (; j + LANES <= e; j += LANES) {
            _Pragma("omp simd")
            for (int l = 0; l < LANES; ++l) {
                lk[l] += sk[j + l];
                ll[l] += sl[j + l];
            }
        }
        for (int l = 0; j < e; ++j, ++l) {
            lk[l] += sk[j];
            ll[l] += sl[j];
        }
        for (int w = LANES / 2; w > 0; w /= 2) {
            for (int l = 0; l < w; ++l) {
                lk[l] += lk[l + w];
                ll[l] += ll[l + w];
            }
        }
        acck[seg_c[r]] += lk[0];
        accl[seg_c[r]] += ll[0];
    }
}

/* Backward over [start, end) with P parameters over rows of PINNER
 * values, of z = Z (x + b, or a buffer that REBUILD fills for [b, b + n):
 * memory-lean training, below). */
#define BWD_BLOCKS(BLOCK_FN, P, PINNER, Z, REBUILD)                        \
    float a2[BLOCK], nl[BLOCK], ki[BLOCK], sk[BLOCK], sl[BLOCK];           \
    float zbuf[BLOCK];                                                     \
    int64_t seg_c[BLOCK], seg_end[BLOCK];                                  \
    (void)zbuf;                                                            \
    ParamTable table;                                                      \
    table_init(&table, kp, lp, lmin, P);                                   \
    Cursor u = cursor_at(start, P, PINNER);                                \
    for (int64_t b = start; b < end; b += BLOCK) {                         \
        const int64_t n = b + BLOCK < end ? BLOCK : end - b;               \
        REBUILD;                                                           \
        if (u.end >= b + n) {                                              \
            double dk = 0.0, dl = 0.0;                                     \
            BLOCK_FN##_row(table_get(&table, u.c), Z, go + b, gx + b, n,   \
                           &dk, &dl);                                      \
            acck[u.c] += dk;                                               \
            accl[u.c] += dl;                                               \
            cursor_step(&u, b + n, P, PINNER);                             \
        } else {                                                           \
            const int64_t rows = block_rows(&table, &u, P, PINNER, Z, b,   \
                                            b + n, a2, nl, ki, seg_c,      \
                                            seg_end);                      \
            BLOCK_FN(a2, nl, ki, Z, go + b, gx + b, n, sk, sl);            \
            add_row_sums(sk, sl, rows, seg_c, seg_end, acck, accl);        \
        }                                                                  \
    }

#define BWD(NAME, BLOCK_FN)                                                \
static void NAME(const float* x, const float* go, float* gx,               \
                 const float* kp, const float* lp, float lmin, int64_t C,  \
                 int64_t inner, double* acck, double* accl,                \
                 int64_t start, int64_t end) {                             \
    BWD_BLOCKS(BLOCK_FN, C, inner, x + b, (void)0)                         \
}

BWD(apa_bwd_range, apa_bwd_block)
BWD(aglu_bwd_range, aglu_bwd_block)

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

/* z is rebuilt a block at a time into a buffer that stays in L1. Shared
 * parameters: one row for the whole range (P = 1, rows of end values). */
#define BWD_REBUILT(NAME, BLOCK_FN)                                        \
static void NAME(const float* src, const float* oth, const float* go,      \
                 float* gx, const float* za, const float* zb,              \
                 const float* zd, int64_t za_rows, const float* kp,        \
                 const float* lp, float lmin, int64_t per_channel,         \
                 int64_t C, int64_t inner, double* acck, double* accl,     \
                 int64_t start, int64_t end) {                             \
    BWD_BLOCKS(BLOCK_FN, per_channel ? C : 1, per_channel ? inner : end,   \
               zbuf, rebuild_block(zbuf, src, oth, za, zb, zd, za_rows,    \
                                   b, b + n, inner, C))                    \
}

BWD_REBUILT(apa_bwd_rebuilt_range, apa_bwd_block)
BWD_REBUILT(aglu_bwd_rebuilt_range, aglu_bwd_block)

/* Public entries (apa.h). The ranges of MMACT_RANGES run on OpenMP threads
 * (one range per thread: its parameter sums go to row t of acc). */
#define FWD_ENTRY(NAME, RANGE)                                             \
void NAME(const float* x, float* y, const float* kp, const float* lp,      \
          float lmin, int64_t C, int64_t inner, int64_t n,                 \
          int64_t threads) {                                               \
    MMACT_RANGES(n, threads, MIN_PER_THREAD, 64,                           \
                 RANGE(x, y, kp, lp, lmin, C, inner, s, e));               \
}
FWD_ENTRY(apa_forward, apa_fwd_range)
FWD_ENTRY(aglu_forward, aglu_fwd_range)

/* Per-thread sums acc (2, T, P) to the gradients of the raw parameters:
 * kappa's scaled by 1/l, lambda's by 1/l^2 and zero where lambda <= lmin
 * (the clamp passes no gradient there); NULL outputs are skipped. */
static void param_grads(const double* acc, int64_t T, int64_t P,
                        const float* lp, float lmin, float* gk, float* gl) {
    for (int64_t c = 0; c < P; ++c) {
        double sk = 0.0, sl = 0.0;
        for (int64_t t = 0; t < T; ++t) {
            sk += acc[t * P + c];
            sl += acc[(T + t) * P + c];
        }
        const double l = lp[c] > lmin ? lp[c] : lmin;
        if (gk) gk[c] = (float)(sk / l);
        if (gl) gl[c] = lp[c] > lmin ? (float)(sl / (l * l)) : 0.0f;
    }
}

/* acc (2, T, P) zeroed, the ranges run, the sums reduced; -1 when the
 * sums cannot be allocated. */
#define WITH_SUMS(P, BODY)                                                 \
    const int64_t nt_ = mmact_threads(n, threads, MIN_PER_THREAD);        \
    double* acc = (double*)calloc((size_t)(2 * nt_ * (P)), sizeof(double)); \
    if (!acc) return -1;                                                   \
    double* acck = acc;                                                    \
    double* accl = acc + nt_ * (P);                                        \
    BODY                                                                   \
    param_grads(acc, nt_, (P), lp, lmin, gk, gl);                          \
    free(acc);                                                             \
    return 0;

#define BWD_ENTRY(NAME, RANGE)                                             \
int64_t NAME(const float* x, const float* go, float* gx, const float* kp,  \
             const float* lp, float lmin, int64_t C, int64_t inner,        \
             int64_t n, int64_t threads, float* gk, float* gl) {           \
    WITH_SUMS(C, MMACT_RANGES(n, nt_, MIN_PER_THREAD, 64,                  \
                              RANGE(x, go, gx, kp, lp, lmin, C, inner,     \
                                    acck + t * C, accl + t * C, s, e));)   \
}
BWD_ENTRY(apa_backward, apa_bwd_range)
BWD_ENTRY(aglu_backward, aglu_bwd_range)

#define BWDR_ENTRY(NAME, RANGE)                                            \
int64_t NAME(const float* src, const float* oth, const float* go,          \
             float* gx, const float* za, const float* zb, const float* zd, \
             int64_t za_rows, const float* kp, const float* lp,            \
             float lmin, int64_t per_channel, int64_t C, int64_t inner,    \
             int64_t n, int64_t threads, float* gk, float* gl) {           \
    const int64_t P = per_channel ? C : 1;                                 \
    WITH_SUMS(P, MMACT_RANGES(n, nt_, MIN_PER_THREAD, 64,                  \
                              RANGE(src, oth, go, gx, za, zb, zd, za_rows, \
                                    kp, lp, lmin, per_channel, C, inner,   \
                                    acck + t * P, accl + t * P, s, e));)   \
}
BWDR_ENTRY(apa_backward_rebuilt, apa_bwd_rebuilt_range)
BWDR_ENTRY(aglu_backward_rebuilt, aglu_bwd_rebuilt_range)
