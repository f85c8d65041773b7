// Package cuda owns the policy's device engine: the decoder's forward and
// hand-written backward pass, AdamW and grad-norm clipping, and a KV-cache
// sampler, all written against one kernel list (Device) with two
// implementations: CUDA (the driver API, cuBLAS and NVRTC loaded at run time
// through purego, kernels embedded as CUDA C and compiled for the device's
// compute capability) and a plain-Go CPU implementation of the same kernels.
//
// The CPU device runs exactly the orchestration the GPU runs (memory plan,
// launch order, backward), so CI checks it against gorgonia's autodiff (the
// model.Model graph) without a GPU; the device check (make gpu-check) then
// checks every CUDA kernel against the CPU one on a GPU machine.
//
// # Pieces
//
//   - Device (device.go): tensors, memory, and the kernel list. CPU in
//     cpu.go and cpu_attention.go; CUDA in cudadev.go (context, memory),
//     cudadev_compile.go (NVRTC, the module cache) and cudadev_kernels.go
//     (the launches) over the bindings of driver.go, found by the loader of
//     loader.go, with the kernels of kernels.cu.
//   - Engine (engine.go, plan.go): weights in four arenas laid out as
//     model.Model's (fp32 master weights and gradients, AdamW moments, and
//     a compute copy in the activation type), one memory plan per shape
//     bucket (model.Config.BucketT), Logprobs/Backward over model.Batch
//     (engine_pass.go), Step (engine_step.go).
//   - Sampling (decode.go): one prefill of the prompt, its KV cache copied
//     to G slots, G completions decoded together; temperature and top-p on
//     the device, behaviour logprobs over the full vocabulary.
//   - Policy (policy.go): the trainer-facing type (Sample, Logprobs,
//     Backward, Step, Version, StartSnapshots, SampleSnapshot) with
//     model-level types, and Reference for the frozen KL reference.
//   - Open (open.go): model.device = "cpu" | "cuda" | "cuda:N".
//   - Collectives (nccl.go): Comms, NCCL's communicators for the GPUs one
//     process drives (all-reduce, reduce-scatter, all-gather, broadcast),
//     NCCL loaded at run time as the other libraries are.
//
// CUDA contexts are per OS thread: every call into a CUDA device runs on a
// goroutine locked to its thread with the device's context current.
package cuda
