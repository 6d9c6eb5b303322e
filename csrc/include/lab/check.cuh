// Error checks for CUDA calls and kernel launches, written once for every launcher.
//
// Launchers are framework-free and return cudaError_t to their caller (csrc/bindings.cpp turns a
// failure into a Python exception), so these macros return instead of aborting.
#pragma once

#include <cuda_runtime.h>

// Return the error of a CUDA runtime call to the caller if it failed.
#define LAB_CUDA_TRY(call)                      \
  do {                                          \
    const cudaError_t lab_err_ = (call);        \
    if (lab_err_ != cudaSuccess) return lab_err_; \
  } while (0)

// After a <<<...>>> launch: configuration errors (bad grid, too much shared memory) surface here.
#define LAB_LAUNCH_CHECK() LAB_CUDA_TRY(cudaGetLastError())
