/* Fused float32 CPU kernels for the FleS pixel passes
 * (mmact.ops.fles.cpu); fles.c is compiled against these prototypes and
 * fles_op.cpp takes its function types from them.
 *
 * Maps are contiguous (planes, H, W) float32, per-window values
 * (planes, nh, nw) with windows of kh x kw cut at the border (no overlap).
 * Each entry runs over planes [0, total) with at most `threads` threads, at
 * least min_per_thread planes each, and returns 0, or -1 when its row
 * buffers (a few rows of W floats) cannot be allocated. Gates by suffix:
 * sigmoid (rho(u) = sigmoid(u); tanh_gate passes cst = 2), erf, mish
 * (tanh(softplus)). */
#ifndef MMACT_FLES_H
#define MMACT_FLES_H
#include <stdint.h>

/* Indicator per window and its divisor: mode 0 (positive)
 * ind = sum relu(x) / max(count(x >= 0), 1); mode 1 (mean) the mean of x,
 * divisor = window area. */
int64_t fles_stats_run(const float* x, float* ind, float* div, int64_t mode,
                       int64_t H, int64_t W, int64_t kh, int64_t kw,
                       int64_t nh, int64_t nw, int64_t total,
                       int64_t min_per_thread, int64_t threads);

/* y = k_ve * rho(cst k_ho x) * x with per-window scales kv, ko. */
int64_t fles_apply_sigmoid_run(const float* x, float* y, const float* kv,
                               const float* ko, float cst, int64_t H,
                               int64_t W, int64_t kh, int64_t kw, int64_t nh,
                               int64_t nw, int64_t total,
                               int64_t min_per_thread, int64_t threads);
int64_t fles_apply_erf_run(const float* x, float* y, const float* kv,
                           const float* ko, float cst, int64_t H, int64_t W,
                           int64_t kh, int64_t kw, int64_t nh, int64_t nw,
                           int64_t total, int64_t min_per_thread,
                           int64_t threads);
int64_t fles_apply_mish_run(const float* x, float* y, const float* kv,
                            const float* ko, float cst, int64_t H, int64_t W,
                            int64_t kh, int64_t kw, int64_t nh, int64_t nw,
                            int64_t total, int64_t min_per_thread,
                            int64_t threads);

/* gx = go k_ve (rho(u) + u rho'(u)), u = cst k_ho x; per window
 * g_ve = sum go x rho(u), g_ho = cst k_ve sum go x^2 rho'(u). */
int64_t fles_gate_bwd_sigmoid_run(const float* x, const float* go, float* gx,
                                  const float* kv, const float* ko, float cst,
                                  float* g_ve, float* g_ho, int64_t H,
                                  int64_t W, int64_t kh, int64_t kw,
                                  int64_t nh, int64_t nw, int64_t total,
                                  int64_t min_per_thread, int64_t threads);
int64_t fles_gate_bwd_erf_run(const float* x, const float* go, float* gx,
                              const float* kv, const float* ko, float cst,
                              float* g_ve, float* g_ho, int64_t H, int64_t W,
                              int64_t kh, int64_t kw, int64_t nh, int64_t nw,
                              int64_t total, int64_t min_per_thread,
                              int64_t threads);
int64_t fles_gate_bwd_mish_run(const float* x, const float* go, float* gx,
                               const float* kv, const float* ko, float cst,
                               float* g_ve, float* g_ho, int64_t H, int64_t W,
                               int64_t kh, int64_t kw, int64_t nh, int64_t nw,
                               int64_t total, int64_t min_per_thread,
                               int64_t threads);

/* gx += f'(x) gind / div of the pixel's window: mode 0 (positive)
 * f' = [x > 0], mode 1 (mean) f' = 1. */
int64_t fles_ind_bwd_run(const float* x, float* gx, const float* gind,
                         const float* div, int64_t mode, int64_t H, int64_t W,
                         int64_t kh, int64_t kw, int64_t nh, int64_t nw,
                         int64_t total, int64_t min_per_thread,
                         int64_t threads);

#endif
