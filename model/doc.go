// Package model owns the policy: the byte-level BPE tokenizer, the transformer
// on gorgonia, the KV-cache sampler, per-token logprobs, the AdamW optimiser and
// checkpoint I/O (safetensors). It knows nothing of software-engineering tasks.
//
// # Pieces
//
//   - Tokenizer (tokenizer.go; tokenizer_train.go, tokenizer_json.go):
//     TrainBPE learns a byte-level BPE in seconds;
//     Encode/Decode round-trip any bytes; Save/LoadTokenizer speak Hugging
//     Face's tokenizer.json, and GPT-2, Llama-3 and Qwen2 files load too
//     (their split regexes use lookahead, hence regexp2). Chat specials:
//     EndOfText (also pad), ImStart, ImEnd.
//   - Model (model.go, graph.go, ops.go): a Llama/Qwen2 decoder (RMSNorm,
//     RoPE, SwiGLU, grouped-query attention, optional q/k/v biases). Weights
//     and gradients live in two flat float32 arenas that the gorgonia graphs,
//     the sampler, the optimiser and checkpoints share. Sequences are packed
//     from position 0 and right-padded, so the causal mask is the only mask.
//     One graph is compiled per (micro-batch, Config.BucketT) bucket and
//     re-bound with gorgonia.Let each call.
//   - Logprobs / Backward: per-completion-token logprobs and entropies at the
//     batch's temperature; Backward also ADDS the gradient of
//     Σ cot·logprob into Grads. The trainer owns the loss: GRPO passes
//     dL/dlogprob, SFT the mean NLL's (train.sftBatch).
//   - Sample (sampler.go): plain-Go decoding with a KV cache over the same
//     weights, packed for the matmul kernel once per call (q/k/v and
//     gate/up fused). The prompt is prefilled once into a cache the G
//     completions share, then they decode together, one batched step per
//     token that allocates nothing. Its behaviour logprobs are log
//     softmax(logits/T) of the sampled token over the full vocabulary,
//     which Logprobs with Batch.Temperature = T reproduces (tests: within
//     1e-4; measured ~2e-6).
//   - AdamW, ClipGradNorm, Schedule (optim.go); Clone for the frozen
//     reference; CopyWeightsFrom to refresh a sampling copy.
//   - Save/Load (checkpoint.go): a directory that transformers and vLLM
//     read as a Llama/Qwen2 model (config.json, model.safetensors or its
//     shards, in f32 or bf16), plus the fp32 masters and optimiser state in
//     state/, tokenizer.json and opaque extra files; streamed and written
//     atomically. Load also reads Hugging Face checkpoints (F32/F16/BF16,
//     tied or untied).
//
// # gorgonia
//
// gorgonia v0.9.18 supplies the matmuls, the embedding gather, the
// additions and reverse-mode autodiff. Everything it lacks or gets wrong
// (docs/ARCHITECTURE.md §9) is a fused float32 op with its own symbolic
// gradient (ops.go): RMSNorm, RoPE, bias add, SwiGLU, causal grouped-query
// attention, and the chosen-token logprob + entropy. workaround_test.go shows each
// upstream defect, including one found here: with BindDualValues some
// parameters' gradients accumulate across runs, so Backward clears them
// before each run.
//
// # Speed
//
// The default build is pure Go: gorgonia's matmuls (through gorgonia.Use),
// our own gemm() and the sampler run on internal/sgemm, an AVX2/FMA
// micro-kernel in Go assembly with packed panels and cache blocking, split
// across cores by us (gonum where the CPU lacks AVX2 or FMA); softmax,
// logprob and SwiGLU passes use internal/vec's vectorised exp. `go build
// -tags blas` (cgo, Debian's libopenblas-dev) routes gorgonia's matmuls and
// gemm() through OpenBLAS instead, single-threaded and split across cores by
// us; the sampler's packed products stay on internal/sgemm. BLASName reports
// which. bench_test.go measures the default model (tokens/s, GFLOP/s, share
// of the measured FMA peak); testdata/torch_bench.py and torch_decode.py run
// the same training step and sampling in PyTorch, and `make bench` prints
// all three side by side.
package model
