// Declarations that NVRTC provides built in, for `make cuda-lint`: clang
// compiles kernels.cu to PTX with them (no CUDA toolkit), which catches
// syntax and type errors on a machine without a GPU.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#include <__clang_cuda_builtin_vars.h>
__device__ float expf(float);
__device__ float logf(float);
__device__ float sqrtf(float);
__device__ float rsqrtf(float);
__device__ float fmaxf(float, float);
__device__ float __uint_as_float(unsigned int);
__device__ unsigned int __float_as_uint(float);
__device__ float __shfl_xor_sync(unsigned int, float, int, int = 32);
__device__ void __syncthreads();
__device__ float atomicAdd(float*, float);
