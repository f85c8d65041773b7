// Package chatml holds the ChatML markers (as Qwen2 writes its chat turns):
// the prompts are written in them and the tokenizer keeps each whole, as
// one special token. Defined here once for both.
package chatml

const (
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	EndOfText = "<|endoftext|>" // end of document; also the pad token
)
