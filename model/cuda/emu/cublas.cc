// libcublas.so.12 on the CPU: cublasGemmEx as cuBLAS defines it (column
// major, op(A) m×k times op(B) k×n, C = alpha·op(A)·op(B) + beta·C, C not
// read when beta is 0), for fp32 and bf16 inputs with fp32 accumulation,
// C in fp32 or bf16 (rounded to nearest even). Each operand's extent is
// checked against the emulator's allocations first (memcheck).
#include <stdint.h>
#include <string.h>

#include <vector>

#include "cudaemu.h"

typedef int cublasStatus_t;
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };

struct Handle {
  uint32_t magic;
};
static const uint32_t kMagic = 0xc0b1a5;

extern "C" cublasStatus_t cublasCreate_v2(Handle** h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  if (!cudaemu_current_ok()) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new Handle{kMagic};
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy_v2(Handle* h) {
  if (!h || h->magic != kMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream_v2(Handle* h, void* stream) {
  if (!h || h->magic != kMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
  return stream ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}

static inline float ld(const void* p, int t, int64_t i) {
  if (t == CUDA_R_32F) return ((const float*)p)[i];
  uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline void st(void* p, int t, int64_t i, float f) {
  if (t == CUDA_R_32F) {
    ((float*)p)[i] = f;
    return;
  }
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    ((uint16_t*)p)[i] = (uint16_t)((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  ((uint16_t*)p)[i] = (uint16_t)(u >> 16);
}

static int esize(int t) { return t == CUDA_R_32F ? 4 : 2; }

// extent checks that a rows×cols column-major operand with leading
// dimension ld lies in one allocation.
static bool extent(const char* what, const void* p, int t, int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return true;
  uint64_t n = ((uint64_t)(cols - 1) * (uint64_t)ld + (uint64_t)rows) * (uint64_t)esize(t);
  const char* why;
  if (cudaemu_check_range((uint64_t)p, n, &why)) return true;
  cudaemu_fail(700, "memcheck: cublasGemmEx: %s (%d×%d, ld %d, %llu bytes at 0x%llx) %s", what, rows, cols, ld,
               (unsigned long long)n, (unsigned long long)(uintptr_t)p, why);
  return false;
}

extern "C" cublasStatus_t cublasGemmEx(Handle* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A,
                                       int at, int lda, const void* B, int bt, int ldb, const void* beta, void* C, int ct,
                                       int ldc, int compute, int algo) {
  (void)algo;
  if (!h || h->magic != kMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!cudaemu_current_ok()) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (ta < 0 || ta > 2 || tb < 0 || tb > 2 || m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  bool types = (at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F) ||
               (at == CUDA_R_16BF && bt == CUDA_R_16BF && (ct == CUDA_R_16BF || ct == CUDA_R_32F));
  if (!types) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if ((k > 0 && (!extent("A", A, at, ar, ac, lda) || !extent("B", B, bt, br, bc, ldb))) ||
      !extent("C", C, ct, m, n, ldc))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  float al, be;
  memcpy(&al, alpha, 4);
  memcpy(&be, beta, 4);
  std::vector<float> acc((size_t)m), bcol((size_t)k), arow((size_t)k);
  for (int j = 0; j < n; j++) {
    for (int l = 0; l < k; l++) bcol[(size_t)l] = ld(B, bt, tb ? (int64_t)l * ldb + j : (int64_t)j * ldb + l);
    if (!ta) {  // columns of A are contiguous: acc += A[:, l]·b_l
      for (int i = 0; i < m; i++) acc[(size_t)i] = 0.f;
      for (int l = 0; l < k; l++) {
        float b = bcol[(size_t)l];
        int64_t off = (int64_t)l * lda;
        if (at == CUDA_R_32F) {
          const float* a = (const float*)A + off;
          for (int i = 0; i < m; i++) acc[(size_t)i] += a[i] * b;
        } else {
          for (int i = 0; i < m; i++) acc[(size_t)i] += ld(A, at, off + i) * b;
        }
      }
    } else {  // rows of op(A) are contiguous columns of A: dot products
      for (int i = 0; i < m; i++) {
        int64_t off = (int64_t)i * lda;
        float s = 0.f;
        if (at == CUDA_R_32F) {
          const float* a = (const float*)A + off;
          for (int l = 0; l < k; l++) s += a[l] * bcol[(size_t)l];
        } else {
          for (int l = 0; l < k; l++) arow[(size_t)l] = ld(A, at, off + l);
          for (int l = 0; l < k; l++) s += arow[(size_t)l] * bcol[(size_t)l];
        }
        acc[(size_t)i] = s;
      }
    }
    for (int i = 0; i < m; i++) {
      int64_t c = (int64_t)j * ldc + i;
      float v = al * acc[(size_t)i];
      if (be != 0.f) v += be * ld(C, ct, c);
      st(C, ct, c, v);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
