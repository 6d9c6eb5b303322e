// cp.async (sm_80+): 16-byte global -> shared copies that complete asynchronously, without passing
// through registers; a thread waits for its own copies with cp_async_wait (no barrier needed to read
// back what it copied itself).
#pragma once

#include <cuda_runtime.h>

namespace lab {

// A whole 16-byte pack, .ca (cached in L1 and L2: cp.async's default, as QuACK's softmax copies).
// Not .cg: on an H100 ncu counted twice the ideal L2 sectors for the .cg form a warp issues over 512
// contiguous bytes (a 50% L2 hit rate for loads that read every byte once), where the .ca form's were
// ideal (notebook/async-copy-tuning/).
__device__ __forceinline__ void cp_async_16_ca(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
// Copies src_bytes (<= 16) and zero-fills the rest of the 16 bytes: a row's partial last pack never
// reads past the row. .ca, as above.
__device__ __forceinline__ void cp_async_16_partial(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
// 16 bytes from gmem to the shared-memory address `smem` where `pred`, nothing otherwise (no zero fill).
__device__ __forceinline__ void cp_async_16_if(unsigned smem, const void* gmem, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.ca.shared.global [%0], [%1], 16;\n}\n" ::"r"(smem),
      "l"(gmem), "r"(static_cast<int>(pred))
      : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most PENDING of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// A 16-byte read of shared memory that the compiler may not merge with another read of the same bytes, nor move
// across other memory accesses (the "memory" clobber: a store to the same slot before it stays before it): a row
// kept in shared memory is read again for each pass over it, not held in registers between the passes
// (register_cached's SHARED_ROW).
__device__ __forceinline__ uint4 ld_shared_16_volatile(const void* smem) {
  const unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(src)
               : "memory");
  return r;
}

}  // namespace lab
