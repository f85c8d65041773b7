// swetui's decoder kernels, compiled at start by NVRTC for the device's
// compute capability (model/cuda/cudadev.go). No headers: NVRTC provides
// the device built-ins used here (expf, logf, sqrtf, __shfl_xor_sync,
// atomicAdd, __float_as_uint).
//
// Defines, set by the loader:
//   SWETUI_BF16  1: activations and compute weights are bf16 (act_t is a
//                bf16 bit pattern); 0: fp32. Master weights, gradients,
//                optimiser state, norms' weights, biases, statistics and the
//                residual stream are fp32 in both.
//   SWETUI_HD    the attention head size.
//
// Layouts are row-major and match the CPU device (model/cuda/cpu.go), which
// is the reference every kernel is checked against. Every kernel is a plain
// launch of 1-D or 3-D grids; the host side picks grid and block sizes.

#ifndef SWETUI_BF16
#define SWETUI_BF16 0
#endif
#ifndef SWETUI_HD
#define SWETUI_HD 64
#endif

typedef long long i64;

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ i64 lmin(i64 a, i64 b) { return a < b ? a : b; }

__device__ __forceinline__ float bf16_ld(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ unsigned short bf16_st(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

#if SWETUI_BF16
typedef unsigned short act_t;
__device__ __forceinline__ float ld(act_t x) { return bf16_ld(x); }
__device__ __forceinline__ act_t st(float f) { return bf16_st(f); }
#else
typedef float act_t;
__device__ __forceinline__ float ld(act_t x) { return x; }
__device__ __forceinline__ act_t st(float f) { return f; }
#endif

#define NEG_INF __uint_as_float(0xff800000u)
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// Block-wide reductions; blockDim.x must be a multiple of 32 (at most 1024).
// Every thread gets the result. sh holds 32 floats.
__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < nw ? sh[l] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float block_max(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < nw ? sh[l] : NEG_INF;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Double sums through shared memory (sh holds blockDim.x doubles).
__device__ double block_sum_d(double v, double* sh) {
  __syncthreads();
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

// ---- elementwise and row kernels ----

extern "C" __global__ void embed(float* x, const act_t* table, const int* tok, int n, int d) {
  GRID_STRIDE(i, (i64)n * d) {
    i64 r = i / d, c = i % d;
    x[i] = ld(table[(i64)tok[r] * d + c]);
  }
}

extern "C" __global__ void embed_bwd(float* dtable, const float* dx, const int* tok, int n, int d) {
  GRID_STRIDE(i, (i64)n * d) {
    i64 r = i / d, c = i % d;
    atomicAdd(&dtable[(i64)tok[r] * d + c], dx[i]);
  }
}

// One block per row.
extern "C" __global__ void rmsnorm(act_t* y, float* rstd, const float* x, const float* w, int n, int d, float eps) {
  __shared__ float sh[32];
  i64 row = blockIdx.x;
  const float* xr = x + row * d;
  float ss = 0.f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
  ss = block_sum(ss, sh);
  float r = rsqrtf(ss / d + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int j = threadIdx.x; j < d; j += blockDim.x) y[row * d + j] = st(xr[j] * r * w[j]);
}

// dx += r·(dy∘w) − x·r³/d·Σ dy∘w∘x; one block per row.
extern "C" __global__ void rmsnorm_bwd_dx(float* dx, const act_t* dy, const float* x, const float* w, const float* rstd, int n, int d) {
  __shared__ float sh[32];
  i64 row = blockIdx.x;
  const float* xr = x + row * d;
  const act_t* gr = dy + row * d;
  float dot = 0.f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) dot += ld(gr[j]) * w[j] * xr[j];
  dot = block_sum(dot, sh);
  float r = rstd[row];
  float c = dot * r * r * r / d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) dx[row * d + j] += r * ld(gr[j]) * w[j] - xr[j] * c;
}

// Column sums over row chunks, one atomic add per chunk and column: grid
// (ceil(d/blockDim), chunks). dw_j += Σ_r dy[r, j]·x[r, j]·rstd[r].
extern "C" __global__ void rmsnorm_bwd_dw(float* dw, const act_t* dy, const float* x, const float* rstd, int n, int d) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  int per = (n + gridDim.y - 1) / gridDim.y;
  int r0 = blockIdx.y * per, r1 = imin(n, r0 + per);
  float acc = 0.f;
  for (int r = r0; r < r1; r++) acc += ld(dy[(i64)r * d + j]) * x[(i64)r * d + j] * rstd[r];
  if (r1 > r0) atomicAdd(&dw[j], acc);
}

// db_j += Σ_r dy[r, j], in the same layout as rmsnorm_bwd_dw.
extern "C" __global__ void bias_bwd(float* db, const act_t* dy, int n, int c) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  int per = (n + gridDim.y - 1) / gridDim.y;
  int r0 = blockIdx.y * per, r1 = imin(n, r0 + per);
  float acc = 0.f;
  for (int r = r0; r < r1; r++) acc += ld(dy[(i64)r * c + j]);
  if (r1 > r0) atomicAdd(&db[j], acc);
}

extern "C" __global__ void add_bias(act_t* y, const float* b, int n, int c) {
  GRID_STRIDE(i, (i64)n * c) y[i] = st(ld(y[i]) + b[i % c]);
}

// Rotate-half RoPE in place; one thread per (row, head, pair).
extern "C" __global__ void rope(act_t* x, const float* cosT, const float* sinT, const int* pos, int n, int width, int hd, float sign) {
  int half = hd / 2, pairs = width / 2;
  GRID_STRIDE(i, (i64)n * pairs) {
    i64 row = i / pairs;
    int rem = (int)(i % pairs), head = rem / half, j = rem % half;
    i64 a = row * width + (i64)head * hd + j, b = a + half;
    i64 t = (i64)pos[row] * half + j;
    float c = cosT[t], s = sign * sinT[t];
    float x1 = ld(x[a]), x2 = ld(x[b]);
    x[a] = st(x1 * c - x2 * s);
    x[b] = st(x2 * c + x1 * s);
  }
}

extern "C" __global__ void swiglu(act_t* y, const act_t* g, const act_t* u, i64 n) {
  GRID_STRIDE(i, n) {
    float a = ld(g[i]);
    y[i] = st(a / (1.f + expf(-a)) * ld(u[i]));
  }
}

extern "C" __global__ void swiglu_bwd(act_t* dg, act_t* du, const act_t* dy, const act_t* g, const act_t* u, i64 n) {
  GRID_STRIDE(i, n) {
    float a = ld(g[i]), s = 1.f / (1.f + expf(-a)), d = ld(dy[i]);
    dg[i] = st(d * ld(u[i]) * s * (1.f + a * (1.f - s)));
    du[i] = st(d * a * s);
  }
}

extern "C" __global__ void add_into(float* x, const act_t* y, i64 n) {
  GRID_STRIDE(i, n) x[i] += ld(y[i]);
}

extern "C" __global__ void cast_f32_bf16(unsigned short* dst, const float* src, i64 n) {
  GRID_STRIDE(i, n) dst[i] = bf16_st(src[i]);
}

extern "C" __global__ void cast_bf16_f32(float* dst, const unsigned short* src, i64 n) {
  GRID_STRIDE(i, n) dst[i] = bf16_ld(src[i]);
}

extern "C" __global__ void gather_rows_u32(unsigned int* dst, const unsigned int* src, const int* idx, int m, int d) {
  GRID_STRIDE(i, (i64)m * d) dst[i] = src[(i64)idx[i / d] * d + i % d];
}

extern "C" __global__ void scatter_rows_u32(unsigned int* dst, const unsigned int* src, const int* idx, int m, int d) {
  GRID_STRIDE(i, (i64)m * d) dst[(i64)idx[i / d] * d + i % d] = src[i];
}

extern "C" __global__ void gather_rows_u16(unsigned short* dst, const unsigned short* src, const int* idx, int m, int d) {
  GRID_STRIDE(i, (i64)m * d) dst[i] = src[(i64)idx[i / d] * d + i % d];
}

extern "C" __global__ void scatter_rows_u16(unsigned short* dst, const unsigned short* src, const int* idx, int m, int d) {
  GRID_STRIDE(i, (i64)m * d) dst[(i64)idx[i / d] * d + i % d] = src[i];
}

extern "C" __global__ void kv_write(act_t* kc, act_t* vc, const act_t* k, const act_t* v, const int* slot, const int* pos, int r, int kvd, int cap) {
  GRID_STRIDE(i, (i64)r * kvd) {
    i64 row = i / kvd, c = i % kvd;
    i64 at = ((i64)slot[row] * cap + pos[row]) * kvd + c;
    kc[at] = k[i];
    vc[at] = v[i];
  }
}

// ---- attention ----
//
// Flash-style: a group of TPR threads owns one query (or key) row, each
// thread EPT of its HD elements; dot products are reduced across the group
// with shuffles. A block holds BR rows and walks BC-row tiles of the other
// side through shared memory (as fp32). Shuffles sit where every thread of
// the warp reaches them; masking comes after.

#define HD SWETUI_HD
#define EPT (HD < 16 ? HD : 16)
#define TPR (HD / EPT)
#define BR 64
#define BC (HD <= 64 ? 64 : 4096 / HD)

__device__ __forceinline__ float group_sum(float v) {
  for (int o = TPR >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// o = softmax(q kᵀ·scale, causal) v; lse[n, h] = log-sum-exp of row n's
// scores. Grid (ceil(T/BR), H, B), block BR·TPR.
extern "C" __global__ void attn_fwd(act_t* o, float* lse, const act_t* q, const act_t* k, const act_t* v,
                                    int B, int T, int H, int KVH, float scale) {
  __shared__ float Ks[BC][HD];
  __shared__ float Vs[BC][HD];
  int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KVH);
  int qw = H * HD, kw = KVH * HD;
  int i = blockIdx.x * BR + threadIdx.x / TPR, part = threadIdx.x % TPR;
  bool valid = i < T;
  float qr[EPT], acc[EPT];
  float m = NEG_INF, l = 0.f;
  i64 qoff = ((i64)b * T + (valid ? i : 0)) * qw + h * HD + part * EPT;
  for (int e = 0; e < EPT; e++) {
    qr[e] = ld(q[qoff + e]) * scale;
    acc[e] = 0.f;
  }
  int kend = imin(T, (blockIdx.x + 1) * BR);  // causal: no key beyond the block's last row
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    for (int t = threadIdx.x; t < BC * HD; t += blockDim.x) {
      int j = t / HD, c = t % HD;
      float kv = 0.f, vv = 0.f;
      if (k0 + j < T) {
        i64 at = ((i64)b * T + k0 + j) * kw + kh * HD + c;
        kv = ld(k[at]);
        vv = ld(v[at]);
      }
      Ks[j][c] = kv;
      Vs[j][c] = vv;
    }
    __syncthreads();
    int jn = imin(BC, kend - k0);
    for (int j = 0; j < jn; j++) {
      float s = 0.f;
      for (int e = 0; e < EPT; e++) s += qr[e] * Ks[j][part * EPT + e];
      s = group_sum(s);
      if (!valid || k0 + j > i) continue;
      float mn = fmaxf(m, s);
      float corr = expf(m - mn), p = expf(s - mn);
      l = l * corr + p;
      for (int e = 0; e < EPT; e++) acc[e] = acc[e] * corr + p * Vs[j][part * EPT + e];
      m = mn;
    }
  }
  if (!valid) return;
  float inv = 1.f / l;
  for (int e = 0; e < EPT; e++) o[qoff + e] = st(acc[e] * inv);
  if (part == 0) lse[((i64)b * T + i) * H + h] = m + logf(l);
}

// delta[n, h] = Σ do∘o over the head; one thread per (n, h).
extern "C" __global__ void attn_delta(float* delta, const act_t* o, const act_t* dout, int n, int H) {
  GRID_STRIDE(i, (i64)n * H) {
    i64 off = i * HD;  // (n·H + h)·HD: rows are [H·HD]
    float s = 0.f;
    for (int e = 0; e < HD; e++) s += ld(dout[off + e]) * ld(o[off + e]);
    delta[i] = s;
  }
}

// dq = Σ_j ds_ij·scale·k_j with p = exp(q·k·scale − lse), ds = p·(do·v − delta).
// Grid (ceil(T/BR), H, B).
extern "C" __global__ void attn_bwd_dq(act_t* dq, const act_t* q, const act_t* k, const act_t* v, const act_t* dout,
                                       const float* lse, const float* delta, int B, int T, int H, int KVH, float scale) {
  __shared__ float Ks[BC][HD];
  __shared__ float Vs[BC][HD];
  int b = blockIdx.z, h = blockIdx.y, kh = h / (H / KVH);
  int qw = H * HD, kw = KVH * HD;
  int i = blockIdx.x * BR + threadIdx.x / TPR, part = threadIdx.x % TPR;
  bool valid = i < T;
  i64 row = (i64)b * T + (valid ? i : 0);
  i64 qoff = row * qw + h * HD + part * EPT;
  float qr[EPT], dor[EPT], acc[EPT];
  for (int e = 0; e < EPT; e++) {
    qr[e] = ld(q[qoff + e]) * scale;
    dor[e] = ld(dout[qoff + e]);
    acc[e] = 0.f;
  }
  float L = lse[row * H + h], Dl = delta[row * H + h];
  int kend = imin(T, (blockIdx.x + 1) * BR);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    for (int t = threadIdx.x; t < BC * HD; t += blockDim.x) {
      int j = t / HD, c = t % HD;
      float kv = 0.f, vv = 0.f;
      if (k0 + j < T) {
        i64 at = ((i64)b * T + k0 + j) * kw + kh * HD + c;
        kv = ld(k[at]);
        vv = ld(v[at]);
      }
      Ks[j][c] = kv;
      Vs[j][c] = vv;
    }
    __syncthreads();
    int jn = imin(BC, kend - k0);
    for (int j = 0; j < jn; j++) {
      float s = 0.f, dp = 0.f;
      for (int e = 0; e < EPT; e++) {
        s += qr[e] * Ks[j][part * EPT + e];
        dp += dor[e] * Vs[j][part * EPT + e];
      }
      s = group_sum(s);
      dp = group_sum(dp);
      if (!valid || k0 + j > i) continue;
      float ds = expf(s - L) * (dp - Dl) * scale;
      for (int e = 0; e < EPT; e++) acc[e] += ds * Ks[j][part * EPT + e];
    }
  }
  if (!valid) return;
  for (int e = 0; e < EPT; e++) dq[qoff + e] = st(acc[e]);
}

// dk_j = Σ_{h in group, i >= j} ds_ij·scale·q_i, dv_j = Σ p_ij·do_i. A group
// of TPR threads owns key row j of kv head kh and walks the query rows of
// every head that reads kh. Grid (ceil(T/BR), KVH, B).
extern "C" __global__ void attn_bwd_dkdv(act_t* dk, act_t* dv, const act_t* q, const act_t* k, const act_t* v,
                                         const act_t* dout, const float* lse, const float* delta,
                                         int B, int T, int H, int KVH, float scale) {
  __shared__ float Qs[BC][HD];
  __shared__ float Ds[BC][HD];
  __shared__ float Ls[BC], Dls[BC];
  int b = blockIdx.z, kh = blockIdx.y, group = H / KVH;
  int qw = H * HD, kw = KVH * HD;
  int j = blockIdx.x * BR + threadIdx.x / TPR, part = threadIdx.x % TPR;
  bool valid = j < T;
  i64 koff = ((i64)b * T + (valid ? j : 0)) * kw + kh * HD + part * EPT;
  float kr[EPT], vr[EPT], dka[EPT], dva[EPT];
  for (int e = 0; e < EPT; e++) {
    kr[e] = ld(k[koff + e]);
    vr[e] = ld(v[koff + e]);
    dka[e] = 0.f;
    dva[e] = 0.f;
  }
  int istart = blockIdx.x * BR;  // causal: no query before the block's first key
  for (int h = kh * group; h < (kh + 1) * group; h++) {
    for (int i0 = istart; i0 < T; i0 += BC) {
      __syncthreads();
      for (int t = threadIdx.x; t < BC * HD; t += blockDim.x) {
        int r = t / HD, c = t % HD;
        float qv = 0.f, dv_ = 0.f;
        if (i0 + r < T) {
          i64 at = ((i64)b * T + i0 + r) * qw + h * HD + c;
          qv = ld(q[at]);
          dv_ = ld(dout[at]);
        }
        Qs[r][c] = qv;
        Ds[r][c] = dv_;
      }
      for (int r = threadIdx.x; r < BC; r += blockDim.x) {
        bool in = i0 + r < T;
        i64 at = ((i64)b * T + i0 + r) * H + h;
        Ls[r] = in ? lse[at] : 0.f;
        Dls[r] = in ? delta[at] : 0.f;
      }
      __syncthreads();
      int rn = imin(BC, T - i0);
      for (int r = 0; r < rn; r++) {
        float s = 0.f, dp = 0.f;
        for (int e = 0; e < EPT; e++) {
          s += Qs[r][part * EPT + e] * kr[e];
          dp += Ds[r][part * EPT + e] * vr[e];
        }
        s = group_sum(s);
        dp = group_sum(dp);
        if (!valid || i0 + r < j) continue;
        float p = expf(s * scale - Ls[r]);
        float ds = p * (dp - Dls[r]) * scale;
        for (int e = 0; e < EPT; e++) {
          dva[e] += p * Ds[r][part * EPT + e];
          dka[e] += ds * Qs[r][part * EPT + e];
        }
      }
    }
  }
  if (!valid) return;
  for (int e = 0; e < EPT; e++) {
    dk[koff + e] = st(dka[e]);
    dv[koff + e] = st(dva[e]);
  }
}

// One query row of one head over its cache slot, keys split across the
// block's groups (each with its own running softmax), merged at the end.
// Grid (H, R), block 128.
#define DEC_THREADS 128
#define DEC_GROUPS (DEC_THREADS / TPR)
extern "C" __global__ void attn_decode(act_t* o, const act_t* q, const act_t* kc, const act_t* vc, const int* slot,
                                       const int* length, int R, int H, int KVH, int cap, float scale) {
  __shared__ float Ms[DEC_GROUPS], Lsum[DEC_GROUPS];
  __shared__ float Acc[DEC_GROUPS][HD];
  int h = blockIdx.x, r = blockIdx.y, kh = h / (H / KVH);
  int qw = H * HD, kw = KVH * HD;
  int g = threadIdx.x / TPR, part = threadIdx.x % TPR;
  int len = length[r];
  const act_t* kb = kc + (i64)slot[r] * cap * kw + kh * HD + part * EPT;
  const act_t* vb = vc + (i64)slot[r] * cap * kw + kh * HD + part * EPT;
  float qr[EPT], acc[EPT];
  for (int e = 0; e < EPT; e++) {
    qr[e] = ld(q[(i64)r * qw + h * HD + part * EPT + e]) * scale;
    acc[e] = 0.f;
  }
  float m = NEG_INF, l = 0.f;
  // Every group runs the same number of iterations so shuffles stay uniform.
  int iters = (len + DEC_GROUPS - 1) / DEC_GROUPS;
  for (int it = 0; it < iters; it++) {
    int j = it * DEC_GROUPS + g;
    bool in = j < len;
    float s = 0.f;
    if (in)
      for (int e = 0; e < EPT; e++) s += qr[e] * ld(kb[(i64)j * kw + e]);
    s = group_sum(s);
    if (!in) continue;
    float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    for (int e = 0; e < EPT; e++) acc[e] = acc[e] * corr + p * ld(vb[(i64)j * kw + e]);
    m = mn;
  }
  if (part == 0) {
    Ms[g] = m;
    Lsum[g] = l;
  }
  for (int e = 0; e < EPT; e++) Acc[g][part * EPT + e] = acc[e];
  __syncthreads();
  for (int c = threadIdx.x; c < HD; c += blockDim.x) {
    float M = NEG_INF;
    for (int x = 0; x < DEC_GROUPS; x++) M = fmaxf(M, Ms[x]);
    float num = 0.f, den = 0.f;
    for (int x = 0; x < DEC_GROUPS; x++) {
      if (Lsum[x] == 0.f) continue;  // a group that saw no key
      float w = expf(Ms[x] - M);
      num += Acc[x][c] * w;
      den += Lsum[x] * w;
    }
    o[(i64)r * qw + h * HD + c] = st(num / den);
  }
}

// ---- logprobs, sampling ----

// out[n] = (log softmax(z·invT)[t], entropy), lse[n]; one block per row.
extern "C" __global__ void chosen_logprob(float* out, float* lse, const act_t* z, const int* tgt, int n, int V, float invT) {
  __shared__ float sh[32];
  i64 row = blockIdx.x;
  int t = tgt[row];
  if (t < 0) {  // uniform across the block: no reduction is skipped by some threads only
    if (threadIdx.x == 0) {
      out[2 * row] = 0.f;
      out[2 * row + 1] = 0.f;
      lse[row] = 0.f;
    }
    return;
  }
  const act_t* zr = z + row * V;
  float m = NEG_INF;
  for (int k = threadIdx.x; k < V; k += blockDim.x) m = fmaxf(m, ld(zr[k]) * invT);
  m = block_max(m, sh);
  float s = 0.f, sz = 0.f;
  for (int k = threadIdx.x; k < V; k += blockDim.x) {
    float zz = ld(zr[k]) * invT, e = expf(zz - m);
    s += e;
    sz += e * zz;
  }
  s = block_sum(s, sh);
  sz = block_sum(sz, sh);
  if (threadIdx.x == 0) {
    float l = m + logf(s);
    out[2 * row] = ld(zr[t]) * invT - l;
    out[2 * row + 1] = l - sz / s;
    lse[row] = l;
  }
}

// dz = [c_lp·(δ_t − p) − c_ent·p·(log p + H)]·invT; one block per row.
extern "C" __global__ void chosen_logprob_bwd(act_t* dz, const act_t* z, const int* tgt, const float* cot, const float* out,
                                              const float* lse, int n, int V, float invT) {
  i64 row = blockIdx.x;
  int t = tgt[row];
  float cl = cot[2 * row], ce = cot[2 * row + 1], L = lse[row], Hh = out[2 * row + 1];
  const act_t* zr = z + row * V;
  act_t* dr = dz + row * V;
  for (int k = threadIdx.x; k < V; k += blockDim.x) {
    if (t < 0) {
      dr[k] = st(0.f);
      continue;
    }
    float lp = ld(zr[k]) * invT - L, p = expf(lp);
    float d = (-cl * p - ce * p * (lp + Hh)) * invT;
    if (k == t) d += cl * invT;
    dr[k] = st(d);
  }
}

// One block per row (blockDim.x = SAMPLE_THREADS). Greedy when invT == 0
// (logprob at temperature 1). Otherwise p = softmax(z·invT); the top-p
// threshold is the largest θ (searched over float bit patterns, which
// order like the values for p >= 0) whose kept mass Σ_{p >= θ} p reaches
// topP; the token is the inverse CDF of u·mass in vocab order over kept
// tokens (each thread owns a contiguous chunk of the vocabulary).
#define SAMPLE_THREADS 512
extern "C" __global__ void sample_tokens(int* tok, float* lp, const act_t* z, const float* u, int V, float invT, float topP) {
  __shared__ float sh[32];
  __shared__ double shd[SAMPLE_THREADS];
  __shared__ int shi[SAMPLE_THREADS];
  i64 row = blockIdx.x;
  const act_t* zr = z + row * V;
  float it = invT == 0.f ? 1.f : invT;
  float m = NEG_INF;
  int arg = 0x7fffffff;
  for (int k = threadIdx.x; k < V; k += blockDim.x) {
    float zz = ld(zr[k]) * it;
    if (zz > m) {
      m = zz;
      arg = k;
    }
  }
  float bm = block_max(m, sh);
  float se = 0.f;
  for (int k = threadIdx.x; k < V; k += blockDim.x) se += expf(ld(zr[k]) * it - bm);
  se = block_sum(se, sh);
  float L = bm + logf(se);
  if (invT == 0.f) {
    // Lowest index among the maxima, as the CPU's first strict maximum.
    shi[threadIdx.x] = m == bm ? arg : 0x7fffffff;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
      if (threadIdx.x < s) shi[threadIdx.x] = imin(shi[threadIdx.x], shi[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      tok[row] = shi[0];
      lp[row] = ld(zr[shi[0]]) - L;
    }
    return;
  }
  unsigned int theta = 0u;
  if (topP > 0.f && topP < 1.f) {
    unsigned int lo = 0u, hi = 0x3f800001u;  // mass(>= lo) >= topP > mass(>= hi)
    while (hi - lo > 1u) {
      unsigned int mid = lo + (hi - lo) / 2u;
      double ms = 0.0;
      for (int k = threadIdx.x; k < V; k += blockDim.x) {
        float p = expf(ld(zr[k]) * it - L);
        if (__float_as_uint(p) >= mid) ms += p;
      }
      ms = block_sum_d(ms, shd);
      if (ms >= (double)topP) lo = mid; else hi = mid;
    }
    theta = lo;
  }
  int chunk = (V + blockDim.x - 1) / blockDim.x;
  int c0 = imin(V, (int)threadIdx.x * chunk), c1 = imin(V, c0 + chunk);
  double mine = 0.0;
  int last = -1;
  for (int k = c0; k < c1; k++) {
    float p = expf(ld(zr[k]) * it - L);
    if (__float_as_uint(p) >= theta) {
      mine += p;
      last = k;
    }
  }
  // Exclusive prefix of the chunks' kept mass, by thread 0 (a few hundred adds).
  __syncthreads();
  shd[threadIdx.x] = mine;
  shi[threadIdx.x] = last;
  __syncthreads();
  __shared__ double total;
  __shared__ int lastKept, picked;
  if (threadIdx.x == 0) {
    double acc = 0.0;
    int lk = 0;
    for (int x = 0; x < blockDim.x; x++) {
      double v = shd[x];
      shd[x] = acc;
      acc += v;
      if (shi[x] >= 0) lk = shi[x];
    }
    total = acc;
    lastKept = lk;
    picked = -1;
  }
  __syncthreads();
  double target = (double)u[row] * total;
  double cum = shd[threadIdx.x];
  if (c0 < c1 && cum <= target && target < cum + mine) {
    for (int k = c0; k < c1; k++) {
      float p = expf(ld(zr[k]) * it - L);
      if (__float_as_uint(p) < theta) continue;
      cum += p;
      if (cum > target) {
        picked = k;  // one thread's range holds the target
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = picked >= 0 ? picked : lastKept;
    tok[row] = t;
    lp[row] = ld(zr[t]) * it - L;
  }
}

// ---- optimiser ----

extern "C" __global__ void adamw(float* w, const float* g, float* m, float* v, i64 n, float b1, float b2, float eps,
                                 float decay, float stepSize, float invBC2, float gscale) {
  GRID_STRIDE(i, n) {
    float gi = g[i] * gscale;
    float mi = b1 * m[i] + (1.f - b1) * gi;
    float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * decay - stepSize * mi / (sqrtf(vi * invBC2) + eps);
  }
}

// out[block] = Σ x² over the block's contiguous chunk; grid SumSquaresParts.
extern "C" __global__ void sum_squares(float* out, const float* x, i64 n) {
  __shared__ double shd[256];
  i64 chunk = (n + gridDim.x - 1) / gridDim.x;
  i64 lo = lmin(n, (i64)blockIdx.x * chunk), hi = lmin(n, lo + chunk);
  double s = 0.0;
  for (i64 i = lo + threadIdx.x; i < hi; i += blockDim.x) s += (double)x[i] * x[i];
  s = block_sum_d(s, shd);
  if (threadIdx.x == 0) out[blockIdx.x] = (float)s;
}
