/* Fused float32 CPU kernels for APA / AGLU (Alexandridis et al. 2025);
 * the math is that of mmact/ops/apa/formula.py, in one pass over memory.
 *
 * These prototypes are the only declaration of the entries: apa.c is
 * compiled against them and apa_op.cpp takes its function types from
 * them.
 *
 * Tensors are contiguous float32 viewed as (outer, C, inner); channel
 * c = (i / inner) % C takes parameters kp[c], lp[c] (C = 1: one shared
 * pair), lambda clamped to lmin from below. `threads` is the most threads
 * to use (fewer for small n). Backward entries write dL/dx to gx and, where
 * gk / gl are not NULL, the gradients of the raw parameters (P values:
 * C, or 1 when shared), zero for lambda where lp <= lmin. Every entry
 * returns 0, or -1 when memory is short (the per-thread sums, the
 * constants of more than 256 channels). */
#ifndef MMACT_APA_H
#define MMACT_APA_H
#include <stdint.h>

/* y = eta(x) (APA) or x * eta(x) (AGLU). */
int64_t apa_forward(const float* x, float* y, const float* kp,
                    const float* lp, float lmin, int64_t C, int64_t inner,
                    int64_t n, int64_t threads);
int64_t aglu_forward(const float* x, float* y, const float* kp,
                     const float* lp, float lmin, int64_t C, int64_t inner,
                     int64_t n, int64_t threads);

/* Backward at x with output gradient go. */
int64_t apa_backward(const float* x, const float* go, float* gx,
                     const float* kp, const float* lp, float lmin,
                     int64_t C, int64_t inner, int64_t n, int64_t threads,
                     float* gk, float* gl);
int64_t aglu_backward(const float* x, const float* go, float* gx,
                      const float* kp, const float* lp, float lmin,
                      int64_t C, int64_t inner, int64_t n, int64_t threads,
                      float* gk, float* gl);

/* Backward at z = src * za[r] + zb[c] (+ oth * zd[c] when oth is not
 * NULL), rebuilt per element (memory-lean training): r = i / inner (za
 * per (outer, C) row, attention weights) when za_rows, else r = c.
 * Parameters per channel (per_channel = 1, P = C) or shared (P = 1). */
int64_t apa_backward_rebuilt(const float* src, const float* oth,
                             const float* go, float* gx, const float* za,
                             const float* zb, const float* zd,
                             int64_t za_rows, const float* kp,
                             const float* lp, float lmin,
                             int64_t per_channel, int64_t C, int64_t inner,
                             int64_t n, int64_t threads, float* gk,
                             float* gl);
int64_t aglu_backward_rebuilt(const float* src, const float* oth,
                              const float* go, float* gx, const float* za,
                              const float* zb, const float* zd,
                              int64_t za_rows, const float* kp,
                              const float* lp, float lmin,
                              int64_t per_channel, int64_t C, int64_t inner,
                              int64_t n, int64_t threads, float* gk,
                              float* gl);

#endif
