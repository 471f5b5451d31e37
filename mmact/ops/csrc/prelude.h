/* Threading shared by mmact's C kernels (built by mmact.ops.cpu_build).
 *
 * Kernels work on index ranges [s, e) of [0, n). Built with OpenMP
 * (-fopenmp: the library then shares the libgomp runtime, and so the thread
 * team, that torch already loaded) the ranges run on OpenMP threads;
 * without it, one after the other in the calling thread. */
#ifndef MMACT_PRELUDE_H
#define MMACT_PRELUDE_H
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Threads for n items: at most `threads`, at least min_per_thread items
 * each, at least 1. */
static inline int64_t mmact_threads(int64_t n, int64_t threads,
                                    int64_t min_per_thread) {
    int64_t nt = n / (min_per_thread > 0 ? min_per_thread : 1);
    nt = nt < threads ? nt : threads;
    return nt > 1 ? nt : 1;
}

/* Runs CALL with s, e (the range) and t (its index) bound, for the
 * mmact_threads(n, threads, min_per_thread) ranges of [0, n) whose starts
 * are multiples of align. */
#define MMACT_RANGES(n, threads, min_per_thread, align, CALL)              \
    do {                                                                   \
        const int64_t nt_r = mmact_threads((n), (threads),                 \
                                           (min_per_thread));              \
        int64_t step_r = ((n) + nt_r - 1) / nt_r;                          \
        step_r = (step_r + (align) - 1) / (align) * (align);               \
        if (nt_r == 1) { /* even a one-thread region is a runtime call */ \
            const int64_t s = 0, e = (n), t = 0;                           \
            (void)t;                                                       \
            if (s < e) CALL;                                               \
        } else {                                                           \
            _Pragma("omp parallel for num_threads(nt_r)")                  \
            for (int64_t t = 0; t < nt_r; ++t) {                           \
                const int64_t s = t * step_r;                              \
                const int64_t e = s + step_r < (n) ? s + step_r : (n);     \
                if (s < e) CALL;                                           \
            }                                                              \
        }                                                                  \
    } while (0)

#define MMACT_UNPAREN(...) __VA_ARGS__

/* MMACT_RANGES of CALL, a range's status (0, or -1 when its buffers cannot
 * be allocated): STATUS becomes -1 when one of them fails (an atomic store
 * that needs no OpenMP, for the build without it). */
#define MMACT_RANGES_STATUS(n, threads, min_per_thread, align, STATUS,     \
                            CALL)                                          \
    MMACT_RANGES(n, threads, min_per_thread, align, {                      \
        if ((CALL) != 0) __atomic_store_n(&(STATUS), -1, __ATOMIC_RELAXED);\
    })

/* Defines the entry NAME_run(PARAMS, total, min_per_thread, threads) that
 * runs the range function NAME(ARGS, s, e, t) over MMACT_RANGES of
 * [0, total); -1 when a range failed, else 0. */
#define MMACT_ENTRY(NAME, PARAMS, ARGS)                                    \
int64_t NAME##_run(MMACT_UNPAREN PARAMS, int64_t total,                    \
                   int64_t min_per_thread, int64_t threads) {              \
    int64_t status = 0;                                                    \
    MMACT_RANGES_STATUS(total, threads, min_per_thread, 1, status,         \
                        NAME(MMACT_UNPAREN ARGS, s, e, t));                \
    return status;                                                         \
}

#endif
