/* The element math of APA / AGLU (docs/design/operators.md, 2.1), written
 * once for every kernel: the C kernels (apa.c) call these functions per
 * value inside their vector loops, the CUDA kernels (apa_cuda.cu) per
 * thread. MMACT_HD (approx.h) makes them __host__ __device__ under nvcc.
 *
 * Base 2 throughout: with a = ln(l) - k z, a2 = log2(e) a, and
 * e = 2^-|a2| = exp(-|a|):
 *   softplus(a) = ln 2 * sp2,  sp2 = max(a2, 0) + log2(1 + e)
 *   eta = 2^(-sp2 / l),  g = sigmoid(a) = (a2 >= 0 ? 1 : e) / (1 + e)
 * and the gradients of a block's values are summed per channel, then
 * scaled once (apa_param_grads). */
#ifndef MMACT_APA_MATH_H
#define MMACT_APA_MATH_H
#include <stdint.h>

#include "approx.h"

/* 2^t for t <= 0: the polynomial of approx.h on the CPU (it vectorizes),
 * the special-function unit on the GPU (exp2f, 2 ulp: one instruction
 * where the polynomial takes a dozen). */
MMACT_HD static inline float apa_exp2(float t) {
#ifdef MMACT_GPU_MATH
    return exp2f(t);
#else
    return exp2_nonpos(t);
#endif
}


/* log2(l) for a normal l > 0: its exponent k plus log2 of the mantissa
 * m = l / 2^k in [sqrt(1/2), sqrt(2)), as 2 atanh(s) / ln 2 with
 * s = (m - 1) / (m + 1), |s| <= 0.172 (log2_1p_from_s, odd in s). Unlike
 * log2f it vectorizes: the constants of every channel in one loop. */
MMACT_HD static inline float apa_log2_pos(float l) {
    union { float f; int32_t i; } u = {l};
    const int32_t k = (u.i - 0x3f3504f3) >> 23; /* 0x3f3504f3: sqrt(1/2) */
    u.i -= k * (1 << 23);
    return (float)k + log2_1p_from_s((u.f - 1.0f) / (u.f + 1.0f));
}

/* A channel's constants, in log2 units: a2 = lnl2 - k2 z, ninvl = -1/l,
 * kinvl = k/l, with lambda clamped to lmin from below (the clamp of
 * mmact.ops.apa) and kept normal (a lambda_min below 1e-38 is not a use). */
typedef struct { float k2, lnl2, ninvl, kinvl; } ApaConsts;

MMACT_HD static inline ApaConsts apa_consts(float kp, float lp, float lmin) {
    float l = lp > lmin ? lp : lmin;
    l = l > 1.17549435e-38f ? l : 1.17549435e-38f;
    const float r = 1.0f / l;
    const ApaConsts c = {kp * 1.44269504f, apa_log2_pos(l), -r, kp * r};
    return c;
}

/* a2 of z with constants k2, lnl2. */
MMACT_HD static inline float apa_arg(float lnl2, float k2, float z) {
    return lnl2 - k2 * z;
}

/* e = 2^-|a2|. */
MMACT_HD static inline float apa_gate_exp(float a2) {
    return apa_exp2(-mmact_fabs(a2));
}

/* log2(eta) = -sp2 / l, given -1/l. */
MMACT_HD static inline float apa_log2_eta(float a2, float e, float ninvl) {
    const float sp2 = (a2 < 0.0f ? 0.0f : a2)
                      + log2_1p_from_s(e / (2.0f + e));
    return sp2 * ninvl;
}

/* The output: eta (APA) or z * eta (AGLU). */
MMACT_HD static inline float apa_output(int aglu, float z, float log2_eta) {
    const float eta = apa_exp2(log2_eta);
    return aglu ? z * eta : eta;
}

/* Backward: sp2 and g; one division gives both 1/(1+e) and 1/(2+e). */
typedef struct { float sp2, g; } ApaSpG;

MMACT_HD static inline ApaSpG apa_sp_g(float a2, float e) {
    const float r = 1.0f / ((1.0f + e) * (2.0f + e));
    const ApaSpG out = {(a2 < 0.0f ? 0.0f : a2)
                            + log2_1p_from_s(e * (1.0f + e) * r),
                        (a2 >= 0.0f ? 1.0f : e) * (2.0f + e) * r};
    return out;
}

/* One value's gradient gx and its terms of the parameter sums, with
 * w = go * eta, sp = softplus(a):
 *   APA:  gx = w g k/l,           sk = w g z,    sl = w (sp - g)
 *   AGLU: gx = w (1 + k z g / l), sk = w g z^2,  sl = w z (sp - g)
 * (kappa's sums are scaled by 1/l and lambda's by 1/l^2 once, in
 * apa_param_grads). */
typedef struct { float gx, sk, sl; } ApaTerms;

MMACT_HD static inline ApaTerms apa_terms(int aglu, float z, float go,
                                          float sp2, float g, float ninvl,
                                          float kinvl) {
    const float sp = sp2 * 0.69314718f;
    const float w = go * apa_exp2(sp2 * ninvl);
    ApaTerms t;
    if (aglu) {
        t.gx = w + kinvl * (w * z * g);
        t.sk = w * z * g * z;
        t.sl = w * z * (sp - g);
    } else {
        t.gx = w * g * kinvl;
        t.sk = w * g * z;
        t.sl = w * (sp - g);
    }
    return t;
}

/* A channel's sums to the gradients of its raw parameters: kappa's scaled
 * by 1/l, lambda's by 1/l^2 and zero where lambda <= lmin (the clamp
 * passes no gradient there). */
MMACT_HD static inline float apa_kappa_grad(double sk, float lp,
                                            float lmin) {
    const double l = lp > lmin ? lp : lmin;
    return (float)(sk / l);
}

MMACT_HD static inline float apa_lambda_grad(double sl, float lp,
                                             float lmin) {
    const double l = lp > lmin ? lp : lmin;
    return lp > lmin ? (float)(sl / (l * l)) : 0.0f;
}

#endif
