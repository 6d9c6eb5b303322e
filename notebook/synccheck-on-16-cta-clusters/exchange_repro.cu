// The cluster exchange of lab/cluster_rows.cuh reduced to itself, outside the lab, for compute-sanitizer: every
// warp of every CTA sends one float into a slot of each CTA of its cluster, then each CTA sums what it received
// and writes it. Launched ROWS clusters of C CTAs of 128 threads (C = 16 needs the non-portable cluster size).
//   MODE 0: st.async into the peers' slots, completed on each peer's mbarrier (the lab's exchange)
//   MODE 1: plain stores through the peers' shared memory (mapa), then a cluster barrier
//   MODE 2: as MODE 0, with a cluster barrier before exit
// Usage: exchange_repro MODE C ROWS; prints whether every sum is right and exits 1 on a CUDA error or a wrong sum.
// Build: nvcc -O3 -arch=sm_90 -o exchange_repro exchange_repro.cu
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;
constexpr int kThreads = 128, kWarps = kThreads / 32, kMaxCluster = 16;

__global__ void exchange(float* out, int mode) {
  __shared__ alignas(8) unsigned long long bar;
  __shared__ float slots[kMaxCluster * kWarps];  // [rank * warps + warp]
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned c = cluster.num_blocks(), rank = cluster.block_rank();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster.sync();  // every CTA's mbarrier is set up before any peer sends
  const float v = static_cast<float>(blockIdx.x / c + 1);
  if (mode == 1) {
    if (lane < static_cast<int>(c)) cluster.map_shared_rank(slots, lane)[rank * kWarps + warp] = v;
    cluster.sync();
  } else {
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(b),
                   "r"(static_cast<unsigned>(kWarps * c * sizeof(float)))
                   : "memory");
    }
    if (lane < static_cast<int>(c)) {
      unsigned slot = static_cast<unsigned>(__cvta_generic_to_shared(&slots[rank * kWarps + warp]));
      unsigned peer_bar = b;
      asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(slot) : "r"(lane));
      asm volatile("mapa.shared::cluster.u32 %0, %0, %1;" : "+r"(peer_bar) : "r"(lane));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(slot),
                   "r"(__float_as_uint(v)), "r"(peer_bar)
                   : "memory");
    }
    unsigned done = 0;
    do {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(b)
          : "memory");
    } while (!done);
  }
  float s = 0.0f;
  for (unsigned i = 0; i < kWarps * c; ++i) s += slots[i];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
  if (mode == 2) cluster.sync();
}

int main(int argc, char** argv) {
  if (argc != 4) return std::fprintf(stderr, "usage: exchange_repro MODE C ROWS\n"), 2;
  const int mode = std::atoi(argv[1]), c = std::atoi(argv[2]), rows = std::atoi(argv[3]);
  const int blocks = rows * c;
  float* out = nullptr;
  cudaMalloc(&out, sizeof(float) * blocks * kThreads);
  cudaFuncSetAttribute(exchange, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = c;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  int clusters = 0;
  cudaOccupancyMaxActiveClusters(&clusters, exchange, &config);
  cudaError_t e = cudaLaunchKernelEx(&config, exchange, out, mode);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<float> h(static_cast<size_t>(blocks) * kThreads);
  if (e == cudaSuccess) e = cudaMemcpy(h.data(), out, sizeof(float) * h.size(), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; e == cudaSuccess && i < blocks * kThreads; ++i) {
    wrong += h[i] != static_cast<float>(kWarps * c * (i / kThreads / c + 1));
  }
  std::printf("mode %d, %d clusters of %d CTAs (%d resident at once): %s, %d wrong sums\n", mode, rows, c, clusters,
              e == cudaSuccess ? "ok" : cudaGetErrorString(e), wrong);
  return e == cudaSuccess && wrong == 0 ? 0 : 1;
}
