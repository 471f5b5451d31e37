/* Fused float32 CPU kernels for APA / AGLU (mmact.ops.apa.cpu).
 * Public entries and their documentation: apa.h. The element math is
 * apa_math.h's (shared with the CUDA kernels); what is here runs it over
 * memory: blocks, stages, channel tables, vector sums. */
#include <stdlib.h>
#include <string.h>

#include "apa.h"
#include "apa_math.h"
#include "prelude.h"

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

/* A channel's constants (apa_math.h). */
typedef ApaConsts Params;

/* The constants of all P channels (structure of arrays), computed once per
 * range in one vectorized loop: a logarithm and a division per channel
 * cost as much as a short row's math. On the stack up to STACK_CHANNELS. */
#define STACK_CHANNELS 256
typedef struct {
    float *k2, *lnl2, *ninvl, *kinvl, *heap;
    float stack[4 * STACK_CHANNELS];
} Table;

/* 0, or -1 when P > STACK_CHANNELS and the heap has no room. */
static inline int table_init(Table* t, const float* kp, const float* lp,
                             float lmin, int64_t P) {
    float* base = t->stack;
    t->heap = NULL;
    if (P > STACK_CHANNELS) {
        base = t->heap = (float*)malloc(sizeof(float) * 4 * (size_t)P);
        if (!base) return -1;
    }
    float *k2 = t->k2 = base, *lnl2 = t->lnl2 = base + P;
    float *ninvl = t->ninvl = base + 2 * P, *kinvl = t->kinvl = base + 3 * P;
    _Pragma("omp simd")
    for (int64_t c = 0; c < P; ++c) {
        const ApaConsts p = apa_consts(kp[c], lp[c], lmin);
        k2[c] = p.k2;
        lnl2[c] = p.lnl2;
        ninvl[c] = p.ninvl;
        kinvl[c] = p.kinvl;
    }
    return 0;
}

static inline Params table_get(const Table* t, int64_t c) {
    Params p = {t->k2[c], t->lnl2[c], t->ninvl[c], t->kinvl[c]};
    return p;
}

/* A range's position: x viewed as (outer, P, inner), the current row's end
 * and parameter index, and span, the whole rows that fit in a block; it
 * moves without dividing, except at a range's start. */
typedef struct { int64_t end, c, P, inner, span; } Cursor;

static inline Cursor cursor_at(int64_t i, int64_t P, int64_t inner) {
    const int64_t row = i / inner;
    Cursor u = {(row + 1) * inner, row % P, P, inner,
                inner < BLOCK ? BLOCK / inner * inner : BLOCK};
    return u;
}

/* Moves the cursor past `rows` rows, the current one included. */
static inline void cursor_skip(Cursor* u, int64_t rows) {
    u->end += rows * u->inner;
    u->c += rows;
    if (u->c >= u->P) u->c = rows == 1 ? 0 : u->c % u->P;
}

/* The end of the block from b: BLOCK values, cut to whole rows when the
 * block crosses a row end, so that a row is summed once and a long row's
 * blocks run with its constants (the *_row functions). */
static inline int64_t block_end(const Cursor* u, int64_t b, int64_t end) {
    const int64_t be = b + BLOCK;
    if (be >= end) return end;
    if (u->end >= be) return be;
    if (u->end - u->inner == b) return b + u->span;
    return u->end + (be - u->end) / u->inner * u->inner;
}

/* A block across several rows (4 x 4 maps, channels-last tokens where a
 * row is one value) has its constants laid out per value: a2 = lnl2 - k2 z,
 * nl = -1/l and (ki not NULL) ki = k/l of each value's row; the stages then
 * run over the whole block however short the rows (per row they would
 * cost about twice as much at 4 x 4). Rows of one value read consecutive
 * channels (block_channels); longer ones repeat their row's constants
 * (block_rows, which writes the rows' parameter indices and ends relative
 * to b to seg_c, seg_end and returns the row count). */
static inline void block_channels(const Table* t, int64_t c, int64_t P,
                                  const float* z, int64_t n, float* a2,
                                  float* nl, float* ki) {
    for (int64_t j = 0; j < n;) {
        const int64_t m = P - c < n - j ? P - c : n - j;
        const float *k2 = t->k2 + c, *lnl2 = t->lnl2 + c;
        const float *ninvl = t->ninvl + c, *kinvl = t->kinvl + c;
        _Pragma("omp simd")
        for (int64_t q = 0; q < m; ++q) {
            a2[j + q] = apa_arg(lnl2[q], k2[q], z[j + q]);
            nl[j + q] = ninvl[q];
        }
        if (ki) {
            _Pragma("omp simd")
            for (int64_t q = 0; q < m; ++q) ki[j + q] = kinvl[q];
        }
        j += m;
        c = 0;
    }
}

/* A row's constants over [q0, q1) of a block (fill_row_exact), or over
 * whole 16-value chunks from q0 (fill_row_chunks: no loop remainder per
 * row; what it writes past q1 is the next row's, written over next). */
#define FILL_ROW(NAME, Q_LOOP)                                             \
static inline void NAME(Params p, const float* z, int64_t q0, int64_t q1,  \
                        float* a2, float* nl, float* ki) {                 \
    Q_LOOP {                                                               \
        a2[q] = apa_arg(p.lnl2, p.k2, z[q]);                               \
        nl[q] = p.ninvl;                                                   \
    }                                                                      \
    if (ki) {                                                              \
        Q_LOOP ki[q] = p.kinvl;                                            \
    }                                                                      \
}
FILL_ROW(fill_row_exact,
         _Pragma("omp simd") for (int64_t q = q0; q < q1; ++q))
FILL_ROW(fill_row_chunks,
         for (int64_t q16 = q0; q16 < q1; q16 += 16)
         _Pragma("omp simd") for (int64_t q = q16; q < q16 + 16; ++q))

static inline int64_t block_rows(const Table* t, Cursor u, const float* z,
                                 int64_t b, int64_t be, float* a2, float* nl,
                                 float* ki, int64_t* seg_c,
                                 int64_t* seg_end) {
    int64_t rows = 0;
    for (int64_t j = b; j < be;) {
        const int64_t e = u.end < be ? u.end : be;
        const Params p = table_get(t, u.c);
        if (j + (e - j + 15) / 16 * 16 <= be)
            fill_row_chunks(p, z, j - b, e - b, a2, nl, ki);
        else
            fill_row_exact(p, z, j - b, e - b, a2, nl, ki);
        seg_c[rows] = u.c;
        seg_end[rows++] = e - b;
        cursor_skip(&u, 1);
        j = e;
    }
    return rows;
}

/* Stage 1: a2 (from z in one row, given across rows) and e = 2^-|a2|. */
static inline void stage_exp_row(Params p, const float* z, int64_t n,
                                 float* a2, float* e) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const float a = apa_arg(p.lnl2, p.k2, z[j]);
        a2[j] = a;
        e[j] = apa_gate_exp(a);
    }
}

static inline void stage_exp(int64_t n, const float* a2, float* e) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) e[j] = apa_gate_exp(a2[j]);
}

/* Forward stage 2: log2(eta), with -1/l as NL. */
#define STAGE_LOG_ETA(NAME, NL_ARG, NL)                                    \
static inline void NAME(int64_t n, const float* a2, const float* e,        \
                        NL_ARG, float* log_eta) {                          \
    _Pragma("omp simd")                                                    \
    for (int64_t j = 0; j < n; ++j)                                        \
        log_eta[j] = apa_log2_eta(a2[j], e[j], (NL));                      \
}
STAGE_LOG_ETA(stage_log_eta_row, float ninvl, ninvl)
STAGE_LOG_ETA(stage_log_eta, const float* nl, nl[j])

/* Backward stage 2: softplus(a) in base 2 and g = sigmoid(a). */
static inline void stage_sp_g(int64_t n, const float* a2, const float* e,
                              float* sp2, float* g) {
    _Pragma("omp simd")
    for (int64_t j = 0; j < n; ++j) {
        const ApaSpG s = apa_sp_g(a2[j], e[j]);
        sp2[j] = s.sp2;
        g[j] = s.g;
    }
}

/* Forward over [start, end), a block at a time; -1 when the channel
 * table has no room. */
#define FWD(NAME, AGLU)                                                    \
static int64_t NAME(const float* x, float* y, const float* kp,             \
                    const float* lp, float lmin, int64_t C, int64_t inner, \
                    int64_t start, int64_t end) {                          \
    float a2[BLOCK], nl[BLOCK], e[BLOCK], log_eta[BLOCK];                  \
    int64_t seg_c[BLOCK], seg_end[BLOCK];                                  \
    Table table;                                                           \
    if (table_init(&table, kp, lp, lmin, C) != 0) return -1;               \
    Cursor u = cursor_at(start, C, inner);                                 \
    for (int64_t b = start, be; b < end; b = be) {                         \
        be = block_end(&u, b, end);                                        \
        int64_t rows = 1;                                                  \
        const int64_t n = be - b;                                          \
        const float* zb = x + b;                                           \
        float* yb = y + b;                                                 \
        if (u.end >= be) {                                                 \
            const Params p = table_get(&table, u.c);                       \
            stage_exp_row(p, zb, n, a2, e);                                \
            stage_log_eta_row(n, a2, e, p.ninvl, log_eta);                 \
        } else {                                                           \
            if (inner == 1) {                                              \
                block_channels(&table, u.c, C, zb, n, a2, nl, NULL);       \
                rows = n;                                                  \
            } else {                                                       \
                rows = block_rows(&table, u, zb, b, be, a2, nl, NULL,      \
                                  seg_c, seg_end);                         \
            }                                                              \
            stage_exp(n, a2, e);                                           \
            stage_log_eta(n, a2, e, nl, log_eta);                          \
        }                                                                  \
        if (be >= u.end) cursor_skip(&u, rows);                            \
        _Pragma("omp simd")                                                \
        for (int64_t j = 0; j < n; ++j)                                    \
            yb[j] = apa_output(AGLU, zb[j], log_eta[j]);                   \
    }                                                                      \
    free(table.heap);                                                      \
    return 0;                                                              \
}

FWD(apa_fwd_range, 0)
FWD(aglu_fwd_range, 1)

/* Backward of a block of n <= BLOCK values z with output gradients go:
 * writes gx and the terms of the parameter-gradient sums (apa_terms):
 * NAME_row inside one row (its sums added to *dk, *dl), NAME across rows
 * (a2, nl, ki from block_rows / block_channels; each value's terms to sk,
 * sl, summed per row by add_row_sums / add_channel_sums). */
#define BWD_BLOCK(NAME, AGLU)                                              \
static inline void NAME##_row(Params p, const float* zb, const float* go,  \
                              float* gx, int64_t n, double* dk,            \
                              double* dl) {                                \
    float a2[BLOCK], e[BLOCK], sp2[BLOCK], g[BLOCK];                       \
    stage_exp_row(p, zb, n, a2, e);                                        \
    stage_sp_g(n, a2, e, sp2, g);                                          \
    float sk = 0.0f, sl = 0.0f;                                            \
    _Pragma("omp simd reduction(+:sk,sl)")                                 \
    for (int64_t j = 0; j < n; ++j) {                                      \
        const ApaTerms t = apa_terms(AGLU, zb[j], go[j], sp2[j], g[j],     \
                                     p.ninvl, p.kinvl);                    \
        gx[j] = t.gx;                                                      \
        sk += t.sk;                                                        \
        sl += t.sl;                                                        \
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
        const ApaTerms t = apa_terms(AGLU, zb[j], go[j], sp2[j], g[j],     \
                                     nl[j], ki[j]);                        \
        gx[j] = t.gx;                                                      \
        sk[j] = t.sk;                                                      \
        sl[j] = t.sl;                                                      \
    }                                                                      \
}
BWD_BLOCK(apa_bwd_block, 0)
BWD_BLOCK(aglu_bwd_block, 1)

/* Adds the rows' sums of sk, sl to their parameters' acck, accl: over the
 * lanes of the ISA's widest vector, then the lanes halved (as an omp simd
 * reduction a row of 16 compiled to 16 dependent scalar additions, more
 * than the row's math; vectors wider than the ISA's are split through
 * memory, which cost the AVX2 build half its backward time). */
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
typedef float f32x4 __attribute__((vector_size(16)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef float lanes_t __attribute__((vector_size(LANES * 4)));

/* Only the halvings of vectors the ISA has (others would change the ABI). */
#define HALVE(NAME, FROM, TO)                                              \
static inline TO NAME(FROM v) {                                            \
    TO lo, hi;                                                             \
    memcpy(&lo, &v, sizeof lo);                                            \
    memcpy(&hi, (const char*)&v + sizeof lo, sizeof hi);                   \
    return lo + hi;                                                        \
}
#if LANES == 16
HALVE(halve16, f32x16, f32x8)
#endif
#if LANES >= 8
HALVE(halve8, f32x8, f32x4)
#endif

static inline float lanes_sum(lanes_t v) {
#if LANES == 16
    const f32x4 s4 = halve8(halve16(v));
#elif LANES == 8
    const f32x4 s4 = halve8(v);
#else
    const f32x4 s4 = v;
#endif
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static inline void add_row_sums(const float* sk, const float* sl,
                                int64_t rows, const int64_t* seg_c,
                                const int64_t* seg_end, double* acck,
                                double* accl) {
    int64_t j = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t e = seg_end[r];
        lanes_t vk = {0.0f}, vl = {0.0f};
        for (; j + LANES <= e; j += LANES) {
            lanes_t tk, tl;
            memcpy(&tk, sk + j, sizeof tk);
            memcpy(&tl, sl + j, sizeof tl);
            vk += tk;
            vl += tl;
        }
        float rk = 0.0f, rl = 0.0f;
        for (; j < e; ++j) {
            rk += sk[j];
            rl += sl[j];
        }
        acck[seg_c[r]] += lanes_sum(vk) + rk;
        accl[seg_c[r]] += lanes_sum(vl) + rl;
    }
}

/* Rows of one value: each value's terms go to its channel's sums. */
static inline void add_channel_sums(const float* sk, const float* sl,
                                    int64_t c, int64_t P, int64_t n,
                                    double* acck, double* accl) {
    for (int64_t j = 0; j < n;) {
        const int64_t m = P - c < n - j ? P - c : n - j;
        double *ak = acck + c, *al = accl + c;
        _Pragma("omp simd")
        for (int64_t q = 0; q < m; ++q) {
            ak[q] += sk[j + q];
            al[q] += sl[j + q];
        }
        j += m;
        c = 0;
    }
}

/* Backward over [start, end) with P parameters over rows of PINNER
 * values, of z = Z (x + b, or a buffer that REBUILD fills for [b, be):
 * memory-lean training, below); -1 when the channel table has no room. */
#define BWD_BLOCKS(BLOCK_FN, P, PINNER, Z, REBUILD)                        \
    float a2[BLOCK], nl[BLOCK], ki[BLOCK], sk[BLOCK], sl[BLOCK];           \
    float zbuf[BLOCK];                                                     \
    int64_t seg_c[BLOCK], seg_end[BLOCK];                                  \
    (void)zbuf;                                                            \
    const int64_t np = (P), rl = (PINNER);                                 \
    Table table;                                                           \
    if (table_init(&table, kp, lp, lmin, np) != 0) return -1;              \
    Cursor u = cursor_at(start, np, rl);                                   \
    for (int64_t b = start, be; b < end; b = be) {                         \
        be = block_end(&u, b, end);                                        \
        const int64_t n = be - b;                                          \
        int64_t rows = 1;                                                  \
        REBUILD;                                                           \
        if (u.end >= be) {                                                 \
            double dk = 0.0, dl = 0.0;                                     \
            BLOCK_FN##_row(table_get(&table, u.c), Z, go + b, gx + b, n,   \
                           &dk, &dl);                                      \
            acck[u.c] += dk;                                               \
            accl[u.c] += dl;                                               \
        } else if (rl == 1) {                                              \
            block_channels(&table, u.c, np, Z, n, a2, nl, ki);             \
            BLOCK_FN(a2, nl, ki, Z, go + b, gx + b, n, sk, sl);            \
            add_channel_sums(sk, sl, u.c, np, n, acck, accl);              \
            rows = n;                                                      \
        } else {                                                           \
            rows = block_rows(&table, u, Z, b, be, a2, nl, ki, seg_c,      \
                              seg_end);                                    \
            BLOCK_FN(a2, nl, ki, Z, go + b, gx + b, n, sk, sl);            \
            add_row_sums(sk, sl, rows, seg_c, seg_end, acck, accl);        \
        }                                                                  \
        if (be >= u.end) cursor_skip(&u, rows);                            \
    }                                                                      \
    free(table.heap);                                                      \
    return 0;

#define BWD(NAME, BLOCK_FN)                                                \
static int64_t NAME(const float* x, const float* go, float* gx,            \
                    const float* kp, const float* lp, float lmin,          \
                    int64_t C, int64_t inner, double* acck, double* accl,  \
                    int64_t start, int64_t end) {                          \
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
    int64_t row = b / inner, c = row % C;
    for (int64_t j = b; j < be; ++row, c = c + 1 == C ? 0 : c + 1) {
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
static int64_t NAME(const float* src, const float* oth, const float* go,      \
                 float* gx, const float* za, const float* zb,              \
                 const float* zd, int64_t za_rows, const float* kp,        \
                 const float* lp, float lmin, int64_t per_channel,         \
                 int64_t C, int64_t inner, double* acck, double* accl,     \
                 int64_t start, int64_t end) {                             \
    BWD_BLOCKS(BLOCK_FN, per_channel ? C : 1, per_channel ? inner : end,   \
               zbuf, rebuild_block(zbuf, src, oth, za, zb, zd, za_rows,    \
                                   b, be, inner, C))                       \
}

BWD_REBUILT(apa_bwd_rebuilt_range, apa_bwd_block)
BWD_REBUILT(aglu_bwd_rebuilt_range, aglu_bwd_block)

/* Public entries (apa.h). The ranges run on OpenMP threads (one range per
 * thread: its parameter sums go to row t of acc); STATUS becomes -1 when
 * one of them fails. */
#define RANGES(n, threads, STATUS, CALL)                                   \
    MMACT_RANGES_STATUS(n, threads, MIN_PER_THREAD, 64, STATUS, CALL)

#define FWD_ENTRY(NAME, RANGE)                                             \
int64_t NAME(const float* x, float* y, const float* kp, const float* lp,   \
             float lmin, int64_t C, int64_t inner, int64_t n,              \
             int64_t threads) {                                            \
    int64_t status = 0;                                                    \
    RANGES(n, threads, status, RANGE(x, y, kp, lp, lmin, C, inner, s, e)); \
    return status;                                                         \
}
FWD_ENTRY(apa_forward, apa_fwd_range)
FWD_ENTRY(aglu_forward, aglu_fwd_range)

/* Per-thread sums acc (2, T, P) to the gradients of the raw parameters
 * (apa_kappa_grad, apa_lambda_grad); NULL outputs are skipped. */
static void param_grads(const double* acc, int64_t T, int64_t P,
                        const float* lp, float lmin, float* gk, float* gl) {
    for (int64_t c = 0; c < P; ++c) {
        double sk = 0.0, sl = 0.0;
        for (int64_t t = 0; t < T; ++t) {
            sk += acc[t * P + c];
            sl += acc[(T + t) * P + c];
        }
        if (gk) gk[c] = apa_kappa_grad(sk, lp[c], lmin);
        if (gl) gl[c] = apa_lambda_grad(sl, lp[c], lmin);
    }
}

/* acc (2, T, P) zeroed, the ranges (CALL, with acck and accl their rows)
 * run, the sums reduced; -1 when memory is short. */
#define WITH_SUMS(P, CALL)                                                 \
    const int64_t nt_ = mmact_threads(n, threads, MIN_PER_THREAD);        \
    double* acc = (double*)calloc((size_t)(2 * nt_ * (P)), sizeof(double)); \
    if (!acc) return -1;                                                   \
    int64_t status = 0;                                                    \
    RANGES(n, nt_, status, ({                                              \
        double *acck = acc + t * (P), *accl = acc + (nt_ + t) * (P);       \
        CALL;                                                              \
    }));                                                                   \
    if (status == 0) param_grads(acc, nt_, (P), lp, lmin, gk, gl);         \
    free(acc);                                                             \
    return status;

#define BWD_ENTRY(NAME, RANGE)                                             \
int64_t NAME(const float* x, const float* go, float* gx, const float* kp,  \
             const float* lp, float lmin, int64_t C, int64_t inner,        \
             int64_t n, int64_t threads, float* gk, float* gl) {           \
    WITH_SUMS(C, RANGE(x, go, gx, kp, lp, lmin, C, inner, acck, accl, s,  \
                       e))                                                 \
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
    WITH_SUMS(P, RANGE(src, oth, go, gx, za, zb, zd, za_rows, kp, lp,     \
                       lmin, per_channel, C, inner, acck, accl, s, e))     \
}
BWDR_ENTRY(apa_backward_rebuilt, apa_bwd_rebuilt_range)
BWDR_ENTRY(aglu_backward_rebuilt, aglu_bwd_rebuilt_range)
