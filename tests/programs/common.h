// Shared by the GPU test programs: error checking as CUDA's samples do it.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, __LINE__, \
                   cudaGetErrorString(err_));                                                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
