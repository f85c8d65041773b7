// Package model owns the policy: the byte-level BPE tokenizer, the transformer
// on gorgonia, the KV-cache sampler, per-token logprobs, the AdamW optimiser and
// checkpoint I/O (safetensors). It knows nothing of software-engineering tasks.
package model
