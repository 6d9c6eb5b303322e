// The softmax backward's rows held as 32-bit words as loaded (a 16-byte pack is kPackWords words: 4 floats, or 8
// 16-bit elements two to a word), and dx = y * (dy - s) computed from them a word at a time, in float32. Held so, a
// thread keeps two 16-bit elements per register instead of one float (cluster.cu, register_cached.cu).
#pragma once

#include <cstdint>
#include <type_traits>

#include "lab/vec.cuh"

namespace lab {

// Elements of T in a 32-bit word: 1 float, or 2 16-bit elements (a CUDA pair, low element first).
template <typename T>
constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));

// Word i of the pack at element e0 of `row`, element by element: an element where in(e) is false reads as +0.
template <typename T, typename In>
__device__ __forceinline__ uint32_t element_word(const T* row, int e0, int i, In in) {
  if constexpr (kPerWord<T> == 1) {
    return in(e0 + i) ? __float_as_uint(row[e0 + i]) : 0u;
  } else {
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(row);
    const int e = e0 + 2 * i;
    return (in(e) ? uint32_t{bits[e]} : 0u) | (in(e + 1) ? uint32_t{bits[e + 1]} : 0u) << 16;
  }
}

// Stores the elements of word i of the pack at element e0 of `row` where in(e) holds.
template <typename T, typename In>
__device__ __forceinline__ void store_element_word(T* row, int e0, int i, uint32_t w, In in) {
  if constexpr (kPerWord<T> == 1) {
    if (in(e0 + i)) row[e0 + i] = __uint_as_float(w);
  } else {
    uint16_t* bits = reinterpret_cast<uint16_t*>(row);
    const int e = e0 + 2 * i;
    if (in(e)) bits[e] = static_cast<uint16_t>(w & 0xFFFFu);
    if (in(e + 1)) bits[e + 1] = static_cast<uint16_t>(w >> 16);
  }
}

// sum(dy * y) over a word of y (a) and of dy (b), in float32.
template <typename T>
__device__ __forceinline__ float word_dot(uint32_t a, uint32_t b) {
  if constexpr (kPerWord<T> == 1) {
    return __uint_as_float(b) * __uint_as_float(a);
  } else {
    const float2 y2 = word_to_float2<T>(a), d2 = word_to_float2<T>(b);
    return d2.x * y2.x + d2.y * y2.y;
  }
}

// A word's two 16-bit elements as floats by other instructions than word_to_float2's (bfloat16: byte permutes;
// float16: the halves swapped, converted, swapped back): the same values, which ptxas does not recognise as the
// conversions word_dot made before the exchange. With word_to_float2 in both places it kept word_dot's floats live
// across the exchange, twice the registers of the words, and spilled.
template <typename T>
__device__ __forceinline__ float2 word_to_float2_again(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return bfloat16_word_to_float2_by_permute(w);
  } else {
    const float2 f = word_to_float2<T>(__byte_perm(w, 0, 0x1032));  // the high element first
    return make_float2(f.y, f.x);
  }
}

// dx = y * (dy - s) for a word of y (a) and of dy (b), rounded to T.
template <typename T>
__device__ __forceinline__ uint32_t word_grad(uint32_t a, uint32_t b, float s) {
  if constexpr (kPerWord<T> == 1) {
    return __float_as_uint(__uint_as_float(a) * (__uint_as_float(b) - s));
  } else {
    const float2 y2 = word_to_float2_again<T>(a), d2 = word_to_float2_again<T>(b);
    return float2_to_word<T>(y2.x * (d2.x - s), y2.y * (d2.y - s));
  }
}

}  // namespace lab
