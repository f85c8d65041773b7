package model

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/swetui/swetui/internal/chatml"
)

// Names of the special tokens of the chat template (package chatml).
const (
	EndOfText = chatml.EndOfText // end of document; also the pad token
	ImStart   = chatml.ImStart
	ImEnd     = chatml.ImEnd
)

// DefaultSpecials are the special tokens TrainBPE adds when given none.
var DefaultSpecials = []string{EndOfText, ImStart, ImEnd}

// Split patterns of the tokenizers we read. GPT2Pattern is what a ByteLevel
// pre-tokenizer with use_regex=true applies; Llama3Pattern (also Qwen2's) is
// the one our trained tokenizers use: it keeps newlines apart from code.
const (
	GPT2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Tokenizer is a byte-level BPE tokenizer (GPT-2 / Llama-3 / Qwen2 family).
// Encode and Decode round-trip any byte string exactly. Safe for concurrent
// use.
type Tokenizer struct {
	tokens   []string       // id -> raw bytes (special tokens: their text)
	vocab    map[string]int // raw bytes -> id (ordinary tokens)
	byteID   [256]int       // single-byte tokens
	merges   map[uint64]merge
	order    [][2]int // merges in rank order (for saving)
	specials map[string]int
	special  []bool
	pattern  string
	re       *regexp2.Regexp
	// prefixSpace prepends a space to text that does not start with one
	// (ByteLevel add_prefix_space).
	prefixSpace bool
	// gpt2Style saves the pre-tokenizer as ByteLevel(use_regex) rather than
	// Split+ByteLevel.
	gpt2Style bool
	// nfc applies Unicode NFC before splitting (Qwen2's normalizer); text
	// that is not already NFC then does not round-trip, as in HF.
	nfc bool
	// ignoreMerges emits a chunk that is itself a vocab entry as one token
	// without merging (Llama-3's model.ignore_merges).
	ignoreMerges bool
	normalizer   json.RawMessage

	mu    sync.Mutex
	cache map[string][]int
}

type merge struct{ rank, id int }

func pairKey(a, b int) uint64 { return uint64(a)<<32 | uint64(uint32(b)) }

// VocabSize is the number of token ids (ordinary and special).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// SpecialID returns the id of a special token by its text, e.g. ImEnd.
func (t *Tokenizer) SpecialID(name string) (int, bool) {
	id, ok := t.specials[name]
	return id, ok
}

// Specials lists the special tokens' texts, by id.
func (t *Tokenizer) Specials() []string {
	var s []string
	for id, sp := range t.special {
		if sp {
			s = append(s, t.tokens[id])
		}
	}
	return s
}

// IsSpecial reports whether id is a special token.
func (t *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < len(t.special) && t.special[id] }

// Token returns the raw bytes of one token.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Decode concatenates the tokens' bytes (special tokens as their text).
// Ids outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 0 && id < len(t.tokens) {
			b.WriteString(t.tokens[id])
		}
	}
	return b.String()
}

// Encode turns text into ids. Special tokens' texts in the input become
// their ids (the chat template is written as text).
func (t *Tokenizer) Encode(text string) []int {
	if t.prefixSpace && text != "" && text[0] != ' ' {
		text = " " + text
	}
	var out []int
	for text != "" {
		at, sp := len(text), ""
		for s := range t.specials {
			if i := strings.Index(text[:min(len(text), at+len(s))], s); i >= 0 && (i < at || i == at && len(s) > len(sp)) {
				at, sp = i, s
			}
		}
		out = t.encodeOrdinary(out, text[:at])
		if sp == "" {
			break
		}
		out = append(out, t.specials[sp])
		text = text[at+len(sp):]
	}
	return out
}

// EncodeOrdinary encodes text treating special tokens' texts as plain text.
func (t *Tokenizer) EncodeOrdinary(text string) []int { return t.encodeOrdinary(nil, text) }

func (t *Tokenizer) encodeOrdinary(out []int, text string) []int {
	if t.nfc {
		text = norm.NFC.String(text)
	}
	for _, chunk := range t.split(text) {
		if t.ignoreMerges {
			if id, ok := t.vocab[chunk]; ok {
				out = append(out, id)
				continue
			}
		}
		out = append(out, t.bpe(chunk)...)
	}
	return out
}

// split applies the pre-tokenizer regex. It runs on runes (each invalid
// UTF-8 byte is one U+FFFD rune) and cuts the original bytes, so arbitrary
// bytes survive; any text the regex skips becomes a chunk of its own.
func (t *Tokenizer) split(s string) []string {
	if s == "" {
		return nil
	}
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	var chunks []string
	prev := 0
	m, err := t.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		lo, hi := offs[m.Index], offs[m.Index+m.Length]
		if lo > prev {
			chunks = append(chunks, s[prev:lo])
		}
		if hi > lo {
			chunks = append(chunks, s[lo:hi])
		}
		prev = hi
		m, err = t.re.FindNextMatch(m)
	}
	if prev < len(s) {
		chunks = append(chunks, s[prev:])
	}
	return chunks
}

// bpe merges one chunk's bytes by merge rank (GPT-2's algorithm: merge every
// occurrence of the lowest-ranked adjacent pair, repeat).
func (t *Tokenizer) bpe(chunk string) []int {
	t.mu.Lock()
	if ids, ok := t.cache[chunk]; ok {
		t.mu.Unlock()
		return ids
	}
	t.mu.Unlock()
	syms := make([]int, len(chunk))
	for i := 0; i < len(chunk); i++ {
		syms[i] = t.byteID[chunk[i]]
	}
	for len(syms) > 1 {
		best, bestRank := -1, int(^uint(0)>>1)
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := t.merges[pairKey(syms[i], syms[i+1])]; ok && mg.rank < bestRank {
				best, bestRank = i, mg.rank
			}
		}
		if best < 0 {
			break
		}
		a, b := syms[best], syms[best+1]
		id := t.merges[pairKey(a, b)].id
		w := 0
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				syms[w] = id
				i++
			} else {
				syms[w] = syms[i]
			}
			w++
		}
		syms = syms[:w]
	}
	if len(chunk) <= 64 { // long chunks (runs of one character) are rare: not worth keeping
		t.mu.Lock()
		if len(t.cache) > 1<<17 {
			clear(t.cache)
		}
		t.cache[chunk] = syms
		t.mu.Unlock()
	}
	return syms
}

func newTokenizer(pattern string) (*Tokenizer, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: split pattern: %w", err)
	}
	return &Tokenizer{vocab: map[string]int{}, merges: map[uint64]merge{}, specials: map[string]int{},
		pattern: pattern, re: re, cache: map[string][]int{}}, nil
}

func (t *Tokenizer) addToken(s string, special bool) int {
	id := len(t.tokens)
	t.tokens = append(t.tokens, s)
	t.special = append(t.special, special)
	if special {
		t.specials[s] = id
	} else {
		t.vocab[s] = id
	}
	return id
}

// --- Hugging Face tokenizer.json ---
