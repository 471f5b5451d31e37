/* Float32 approximations shared by mmact's C kernels (apa.c, fles_op.cpp):
 * plain arithmetic that vectorizes, where libm's scalar calls would cost
 * more than the rest of a small call. */
#ifndef MMACT_APPROX_H
#define MMACT_APPROX_H
#include <stdint.h>

/* A function of the element math that the CUDA kernels share with the C
 * kernels (apa_math.h), as ATen's C10_HOST_DEVICE: __host__ __device__
 * under nvcc, nothing for gcc. */
#ifdef __CUDACC__
#define MMACT_HD __host__ __device__
#else
#define MMACT_HD
#endif

/* Whether the element math takes the GPU's side (exp2f where the CPU has
 * a polynomial): in device code, and in the CPU simulation of the CUDA
 * kernels (mmact.testing.cuda_sim), which runs the GPU's formulas, not its
 * bits (the host's exp2f is not the GPU's). */
#if defined(__CUDA_ARCH__) || defined(MMACT_CUDA_SIM)
#define MMACT_GPU_MATH 1
#endif

/* |v|: the GPU's instruction, the builtin on the CPU (it vectorizes). */
MMACT_HD static inline float mmact_fabs(float v) {
#ifdef MMACT_GPU_MATH
    return fabsf(v);
#else
    return __builtin_fabsf(v);
#endif
}

/* 2^t for t <= 0, the form APA's exponentials take once the arguments are
 * scaled by log2(e) (apa.c does it on the parameters, per channel).
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
    scale.i = (m.i - 0x4b400000 + 127) << 23; /* (n + 127) << 23 */
    return p * scale.f;
}

/* log2(1 + e) for 0 <= e <= 1 given s = e / (2 + e) <= 1/3:
 * 2 atanh(s) / ln 2 with a cubic in s^2 fitted for relative error (2e-7). */
MMACT_HD static inline float log2_1p_from_s(float s) {
    const float s2 = s * s;
    const float s4 = s2 * s2;
    const float p = (2.8853896f + s2 * 0.96193141f)
                    + s4 * (0.57115573f + s2 * 0.4937740f);
    return s * p;
}

/* softplus(a) = max(a, 0) + ln(1 + e^-|a|) (torch's softplus with beta 1:
 * above its threshold of 20 the second term is below float32's resolution
 * of a). Relative error below 1e-6 for a >= -87; below that it returns
 * 2^-126 (absolute error under 1.2e-38). */
static inline float softplus_approx(float a) {
    const float e = exp2_nonpos(-__builtin_fabsf(a) * 1.44269504f);
    return (a > 0.0f ? a : 0.0f)
           + 0.69314718f * log2_1p_from_s(e / (2.0f + e));
}

#endif
