// The CUDA built-ins that swetui's kernels use, for host C++: the emulated
// NVRTC (nvrtc.cc) compiles a program's source after this header, as a
// shared object that the emulated driver (driver.cc) loads and runs, each
// block's threads as cooperative fibers. Only what the header defines is
// claimed; a kernel that uses anything else fails to compile, as it would
// under an NVRTC that lacked it.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
};

// The runtime's side, filled in by the driver when it loads the module.
struct cudaemu_runtime {
  void (*barrier)();                                           // __syncthreads
  void (*shuffle)(void* v, unsigned size, unsigned src_xor, int width, unsigned mask);  // warp exchange
  void (*atomic_note)(void* addr, unsigned size);             // racecheck: atomically updated words
};
struct cudaemu_state {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
  const cudaemu_runtime* rt;
};
extern "C" cudaemu_state __cudaemu;

#ifndef CUDAEMU_RUNTIME  // the driver includes the structs above only

#define threadIdx (__cudaemu.threadIdx)
#define blockIdx (__cudaemu.blockIdx)
#define blockDim (__cudaemu.blockDim)
#define gridDim (__cudaemu.gridDim)
#define warpSize 32

#ifndef __global__  // the emulated NVRTC marks kernels through it
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// A block's shared memory is a function-local static: one copy, seen by
// every fiber of the block; the driver finds each kernel's statics in the
// module's symbol table, poisons them before every block and counts them
// against the 48 KiB a block may hold without opt-in.
#define __shared__ static
#define __restrict__ __restrict

// Memory ordering between fibers: a switch happens only inside the
// runtime's calls, and the clobber keeps the compiler from holding a
// shared or global value in a register across one.
#define CUDAEMU_FENCE() __asm__ __volatile__("" ::: "memory")

static inline void __syncthreads() {
  CUDAEMU_FENCE();
  __cudaemu.rt->barrier();
  CUDAEMU_FENCE();
}
static inline void __syncwarp(unsigned = 0xffffffffu) { CUDAEMU_FENCE(); }
static inline void __threadfence() { CUDAEMU_FENCE(); }
static inline void __threadfence_block() { CUDAEMU_FENCE(); }

template <typename T>
static inline T cudaemu_shfl(unsigned mask, T v, unsigned x, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
  CUDAEMU_FENCE();
  __cudaemu.rt->shuffle(&v, sizeof(T), x, width, mask);
  CUDAEMU_FENCE();
  return v;
}
static inline float __shfl_xor_sync(unsigned mask, float v, int x, int width = 32) { return cudaemu_shfl(mask, v, x, width); }
static inline double __shfl_xor_sync(unsigned mask, double v, int x, int width = 32) { return cudaemu_shfl(mask, v, x, width); }
static inline int __shfl_xor_sync(unsigned mask, int v, int x, int width = 32) { return cudaemu_shfl(mask, v, x, width); }
static inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int x, int width = 32) { return cudaemu_shfl(mask, v, x, width); }
static inline long long __shfl_xor_sync(unsigned mask, long long v, int x, int width = 32) { return cudaemu_shfl(mask, v, x, width); }

// Atomics: fibers switch only at barriers and shuffles, so a plain
// read-modify-write is atomic. Racecheck learns which words are updated
// atomically: their final values may differ with the order, by design.
template <typename T>
static inline T cudaemu_atomic_add(T* p, T v) {
  if (__cudaemu.rt->atomic_note) __cudaemu.rt->atomic_note(p, sizeof(T));
  T old = *p;
  *p = old + v;
  return old;
}
static inline float atomicAdd(float* p, float v) { return cudaemu_atomic_add(p, v); }
static inline double atomicAdd(double* p, double v) { return cudaemu_atomic_add(p, v); }
static inline int atomicAdd(int* p, int v) { return cudaemu_atomic_add(p, v); }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return cudaemu_atomic_add(p, v); }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { return cudaemu_atomic_add(p, v); }

static inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

// Single-precision math as the host's libm computes it: correctly rounded
// or close; the device's expf/logf are within 2 ulp (a GPU can differ in
// the last bits; the tests' tolerances allow for it).
static inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
#define __expf expf
#define __logf logf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// bf16 as cuda_bf16.h defines it: the high half of an fp32, rounded to
// nearest even (NaN kept NaN), as the device's cvt.rn.bf16.f32 does.
struct __nv_bfloat16 {
  unsigned short x;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned int u = __float_as_uint(f);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = (unsigned short)((u >> 16) | 0x40u);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.x = (unsigned short)(u >> 16);
  return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(((unsigned int)h.x) << 16); }

// The launch entry of one kernel: the driver passes the kernelParams array
// of cuLaunchKernel, and each argument is read as the kernel's own type.
namespace cudaemu {
template <int...>
struct seq {};
template <int N, int... I>
struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <int... I>
struct make_seq<0, I...> {
  typedef seq<I...> type;
};
template <typename... A, int... I>
inline void call(void (*f)(A...), void** p, seq<I...>) {
  f(*static_cast<A*>(p[I])...);
}
// argument k's size, and whether it is a pointer (memcheck checks those
// at launch).
template <typename T>
struct is_ptr {
  enum { value = 0 };
};
template <typename T>
struct is_ptr<T*> {
  enum { value = 1 };
};
template <typename... A>
inline int describe(void (*)(A...), int* sizes, int* ptrs, int cap) {
  int s[] = {(int)sizeof(A)..., 0};
  int q[] = {(int)is_ptr<A>::value..., 0};
  int n = (int)sizeof...(A);
  for (int i = 0; i < n && i < cap; i++) {
    sizes[i] = s[i];
    ptrs[i] = q[i];
  }
  return n;
}
template <typename... A>
inline void launch(void (*f)(A...), void** p) {
  call(f, p, typename make_seq<sizeof...(A)>::type());
}
}  // namespace cudaemu
#endif  // CUDAEMU_RUNTIME
