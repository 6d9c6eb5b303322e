// The exponential of the kernels' per-element work: exp(x) = 2^(x log2 e) on the MUFU unit, with
// denormals flushed (ex2.approx.ftz.f32).
//
// Without -use_fast_math, __expf(x) compiles to ex2.approx.f32, whose denormal handling wraps every
// MUFU.EX2 in a compare and two predicated multiplies (FSETP, @P FMUL, MUFU.EX2, @P FMUL): with the
// subtraction of the max and the multiply by log2 e, six instructions per element where this takes
// three. In cuda.cluster's bfloat16 256 x 64 kernel that was 2224 -> 1992 SASS instructions; on the
// H200 scripts/tune_cluster.py measured the best launch of bfloat16 rows up to 5 points of a copy
// faster (N = 65536 with 4096 rows: 91.8 -> 97.0%, 262144: 85.1 -> 89.6; results/h200/
// tune_fast_exp.json against tune_split_barrier*.json), float32 rows level (within a point).
// The flush changes only results below 2^-126 (~1.2e-38), to 0: float32 outputs that small are
// denormals torch keeps, far under every tolerance; bfloat16 and float16 round them to 0 anyway.
// -inf gives 0, +inf gives +inf, NaN stays NaN, as with __expf.
// The merges of online states (online.cuh: a few per row and thread, not per element) keep __expf:
// with fast_exp there, ptxas spilled 8 bytes in two 128-register cluster kernels.
#pragma once

#include <cuda_runtime.h>

namespace lab {

__device__ __forceinline__ float fast_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}

}  // namespace lab
