/*
 * cpu_backend.h — what the CPU backend's files share (not a public API).
 *
 * backend.c runs streams, flags and record/replay; math.c turns each math
 * entry of hy_backend_ops into a call of a kernels/cpu/ops.h function,
 * enqueued through hy_cpu_call so that it is recorded and replayed like
 * everything else; testops.c does the same for the test ops
 * (backend_test.h).
 */
#ifndef HY_CPU_BACKEND_H
#define HY_CPU_BACKEND_H

#include <stddef.h>

#include "backend.h"

/* The largest argument block an enqueued call may carry. */
#define HY_CPU_CALL_ARGS 160

/* Runs fn(args) now, or records it (with a copy of the args) while the
 * stream captures. kind says what it computes, for op timing (op_stats). */
int hy_cpu_call(hy_stream *s, hy_op_kind kind, void (*fn)(const void *args), const void *args,
                size_t size, hy_error *err);

/* hy_cpu_call with the argument block a (a struct, not a pointer). kind:
 * what the call computes, for the backend's op timing (backend.h,
 * op_stats). */
#define HY_CALL(s, kind, fn, a, err) hy_cpu_call((s), (kind), (fn), &(a), sizeof(a), (err))

/* Fills the math entries of ops (math.c). */
void hy_cpu_math_ops(hy_backend_ops *ops);

/* The test ops' table (testops.c). */
const hy_backend_test_ops *hy_cpu_test_ops(void);

#endif
