/* The element math of FleS (docs/design/fles.md), written once for every
 * kernel: the C kernels (fles.c) call these functions per value inside
 * their vector loops, the CUDA kernels (fles_cuda.cu) per thread, and the
 * scale MLP's loops (fles_mlp.h) take fles_exp from here. MMACT_HD
 * (approx.h) makes them __host__ __device__ under nvcc.
 *
 * Gates rho(u) with u = cst k_ho x (cst: the gate's constant c of
 * mmact.ops.fles.gates; tanh_gate is the sigmoid with cst = 2):
 *   sigmoid  r = 1 / (1 + e^-u)                 d = r (1 - r)
 *   erf      r = Phi(u) (A&S 7.1.26)            d = e^(-u^2/2) / sqrt(2 pi)
 *   mish     r = tanh(softplus(u))              d = (1 - r^2) sigmoid(u)
 * Indicators (mode 0 positive, 1 mean) per window: the sum of
 * fles_ind_term over the window's pixels divided by fles_divisor of the
 * count (positive: pixels >= 0; mean: the area); backward adds
 * fles_ind_grad(x, g_ind / divisor) to each pixel's gradient. */
#ifndef MMACT_FLES_MATH_H
#define MMACT_FLES_MATH_H
#include <stdint.h>

#include "approx.h"


/* exp(x), x clamped to [-87, 88]. CPU: Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2, degree-5 polynomial (relative error 2e-7 in float32; plain
 * arithmetic, so the loops vectorize). GPU: exp2f of x log2(e), the
 * special-function unit's 2^t (2 ulp). */
MMACT_HD static inline float fles_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
#ifdef MMACT_GPU_MATH
    return exp2f(x * 1.44269504088896341f);
#else
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
#endif
}

/* A gate's value r = rho(u) and slope d = rho'(u). */
typedef struct { float r, d; } FlesRho;

MMACT_HD static inline FlesRho fles_rho_sigmoid(float u) {
    const float r = 1.0f / (1.0f + fles_exp(-u));
    const FlesRho out = {r, r * (1.0f - r)};
    return out;
}

/* Phi(u) = 0.5 (1 + erf(u / sqrt 2)), erf by A&S 7.1.26 on |u| / sqrt 2
 * (|error| < 1.5e-7). */
MMACT_HD static inline FlesRho fles_rho_erf(float u) {
    const float za = mmact_fabs(u) * 0.70710678118654752f;
    const float t = 1.0f / (1.0f + 0.3275911f * za);
    const float gauss = fles_exp(-za * za);
    float q = 1.061405429f;
    q = q * t - 1.453152027f;
    q = q * t + 1.421413741f;
    q = q * t - 0.284496736f;
    q = q * t + 0.254829592f;
    const float half_erfc = 0.5f * q * t * gauss;
    const FlesRho out = {u >= 0.0f ? 1.0f - half_erfc : half_erfc,
                         gauss * 0.39894228040143268f};
    return out;
}

/* tanh(softplus(u)) = w (w + 2) / (w (w + 2) + 2), w = e^u; u is capped
 * at 20 (rho = 1 there). */
MMACT_HD static inline FlesRho fles_rho_mish(float u) {
    const float w = fles_exp(u < 20.0f ? u : 20.0f);
    const float nw2 = w * (w + 2.0f);
    const float r = nw2 / (nw2 + 2.0f);
    const FlesRho out = {r, (1.0f - r * r) * (w / (1.0f + w))};
    return out;
}

/* The kernels' gate codes (the gates' `kernel` in mmact.ops.fles.gates). */
enum { FLES_SIGMOID = 0, FLES_ERF = 1, FLES_MISH = 2 };

MMACT_HD static inline FlesRho fles_rho(int gate, float u) {
    return gate == FLES_SIGMOID ? fles_rho_sigmoid(u)
           : gate == FLES_ERF   ? fles_rho_erf(u)
                                : fles_rho_mish(u);
}

/* The output y = k_ve rho(u) x given sv = k_ve. */
MMACT_HD static inline float fles_output(float sv, float r, float x) {
    return sv * r * x;
}

/* The input gradient with the scales held fixed,
 * g k_ve (rho(u) + u rho'(u)). */
MMACT_HD static inline float fles_gate_grad(float g, float sv, float u,
                                            FlesRho q) {
    return g * sv * (q.r + u * q.d);
}

/* A pixel's terms of the window sums g_ve = sum g x rho(u) and
 * g_ho = cst k_ve sum g x^2 rho'(u) (the factor cst k_ve applied once per
 * window). */
typedef struct { float sa, sb; } FlesSums;

MMACT_HD static inline FlesSums fles_scale_terms(float g, float x,
                                                 FlesRho q) {
    const float gx = g * x;
    const FlesSums out = {gx * q.r, gx * x * q.d};
    return out;
}

/* A pixel's term of its window's indicator sum, and of the count (1 for
 * x >= 0; positive mode only). */
MMACT_HD static inline float fles_ind_term(int64_t mode, float x) {
    return mode == 0 ? (x > 0.0f ? x : 0.0f) : x;
}

MMACT_HD static inline float fles_ind_count(float x) {
    return x >= 0.0f ? 1.0f : 0.0f;
}

/* A window's divisor from its count (a positive window may have none). */
MMACT_HD static inline float fles_divisor(float count) {
    return count < 1.0f ? 1.0f : count;
}

/* f'(x) q, f' the indicator's slope: the step [x > 0] (positive), 1
 * (mean). */
MMACT_HD static inline float fles_ind_grad(int64_t mode, float x, float q) {
    return mode == 0 ? (x > 0.0f ? q : 0.0f) : q;
}

#endif
