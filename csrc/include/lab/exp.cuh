// The exponential of the kernels' per-element work: exp(x) = 2^(x log2 e) on the MUFU unit, with
// denormals flushed (ex2.approx.ftz.f32).
//
// Without -use_fast_math, __expf(x) compiles to ex2.approx.f32, whose denormal handling wraps every
// MUFU.EX2 in a compare and two predicated multiplies (FSETP, @P FMUL, MUFU.EX2, @P FMUL): with the
// subtraction of the max and the multiply by log2 e, six instructions per element where this takes
// three (cuda.cluster's bfloat16 256 x 64 kernel: 2224 SASS instructions with __expf, 1992 with this), and
// bfloat16 rows up to 5 points of a copy faster on the H200 (measurements: notebook/fast-exp-tuning/).
// The flush changes only results below 2^-126 (~1.2e-38), to 0: float32 outputs that small are
// denormals torch keeps, far under every tolerance; bfloat16 and float16 round them to 0 anyway.
// -inf gives 0, +inf gives +inf, NaN stays NaN, as with __expf.
// The merges of online states (online.cuh: a few per row and thread, not per element) keep __expf:
// with fast_exp there, ptxas spilled 8 bytes in two 128-register cluster kernels.
#pragma once

#include <cuda_runtime.h>

namespace lab {

constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the MUFU unit (ex2.approx.ftz.f32): results below 2^-126 are 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_exp(float x) { return fast_exp2(x * kLog2e); }

// log2(d) on the MUFU unit (lg2.approx.ftz.f32, absolute error about 2^-22 for d >= 1), once per
// row and thread: the operand of fast_exp_over.
__device__ __forceinline__ float fast_log2(float d) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
  return y;
}

// exp(x) / d as 2^(x log2 e - log2 d), given log2_d = fast_log2(d): the division folded into the
// exponent, one FFMA and one MUFU.EX2 where fast_exp(x) * (1 / d) takes FMUL, MUFU.EX2 and FMUL.
// x is the element minus the row max (x <= 0, so |x log2 e - log2 d| stays small and its rounding
// costs a relative error below 2^-18); d is the row's sum of exponentials (>= 1). For
// 16-bit outputs (2^-9 to 2^-12 of rounding) only; NaN in x or d gives NaN, x = -inf gives 0.
__device__ __forceinline__ float fast_exp_over(float x, float log2_d) { return fast_exp2(fmaf(x, kLog2e, -log2_d)); }

// The shift folded into the FFMA as well: 2^(x log2 e - c) with c = shift log2 e (or, for the write,
// shift log2 e + log2 d) rounded once, per row or thread: one FFMA and one MUFU.EX2 per element where
// fast_exp(x - shift) takes FADD, FMUL and MUFU.EX2. The product x log2 e is exact inside the FFMA,
// so the error is c's rounding, |c| 2^-24, plus the result's, |t| 2^-24 with t <= 0 down to -126
// (below, 2^t is 0 anyway): with |shift| <= kFoldMax and log2 d <= 31, |c| <= 401 and the exponent is
// off by at most 3.1e-5, a relative error of 2.2e-5 in the exponential (an exact float64 emulation of
// the FFMA over bfloat16 inputs and 20 random maxima in [-256, 256]: at most 1.7e-5, float32 log2 e
// included). For 16-bit outputs only (their
// tolerance is 2e-3 to 8e-3 of rtol): past kFoldMax, or for an infinite or NaN shift, the callers keep
// the subtraction (x - shift is exact there where the FFMA's c would not be).
constexpr float kFoldMax = 256.0f;
__device__ __forceinline__ bool foldable(float shift) { return fabsf(shift) <= kFoldMax; }
__device__ __forceinline__ float fast_exp2_fma(float x, float c) { return fast_exp2(fmaf(x, kLog2e, -c)); }

}  // namespace lab
