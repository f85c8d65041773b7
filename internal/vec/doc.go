// Package vec holds the float32 row kernels of the model's non-matmul ops:
// max, dot, scale and a vectorised exp fused into the softmax, logprob,
// attention and SwiGLU passes. AVX2/FMA assembly where the CPU has it, the
// same algorithm in plain Go elsewhere; both evaluate exp with one
// polynomial (Cephes's expf, about 1 ulp), so the sampler and the training
// graph, which share these kernels, compute the same numbers.
package vec
