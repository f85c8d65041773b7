package model

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/swetui/swetui/internal/durable"
)

// Names of the special tokens of the chat template (ChatML, as Qwen2 uses).
const (
	EndOfText = "<|endoftext|>" // end of document; also the pad token
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
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

// TrainBPE learns a byte-level BPE of at most vocabSize ids (256 bytes,
// merges, then the special tokens; fewer when no pair occurs twice) from texts, split with Llama3Pattern. Ties between
// equally frequent pairs go to the smaller pair of ids, so training is
// deterministic.
func TrainBPE(ctx context.Context, texts iter.Seq[string], vocabSize int, specials []string) (*Tokenizer, error) {
	if specials == nil {
		specials = DefaultSpecials
	}
	nMerges := vocabSize - 256 - len(specials)
	if nMerges < 0 {
		return nil, fmt.Errorf("TrainBPE: vocab size %d below 256 bytes + %d specials", vocabSize, len(specials))
	}
	t, err := newTokenizer(Llama3Pattern)
	if err != nil {
		return nil, err
	}
	for b := 0; b < 256; b++ {
		t.byteID[b] = t.addToken(string([]byte{byte(b)}), false)
	}
	for _, s := range specials {
		t.specials[s] = -1 // so that training splits them out of the corpus
	}
	counts := map[string]int{}
	n := 0
	for text := range texts {
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		for text != "" {
			at, sp := len(text), ""
			for s := range t.specials {
				if i := strings.Index(text, s); i >= 0 && i < at {
					at, sp = i, s
				}
			}
			for _, c := range t.split(text[:at]) {
				counts[c]++
			}
			if sp == "" {
				break
			}
			text = text[at+len(sp):]
		}
	}
	clear(t.specials)

	// Words as symbol sequences, pair counts, and which words hold a pair.
	type word struct {
		syms  []int
		count int
	}
	words := make([]word, 0, len(counts))
	keys := make([]string, 0, len(counts))
	for c := range counts {
		keys = append(keys, c)
	}
	sort.Strings(keys) // deterministic word order
	pairs := map[uint64]int{}
	where := map[uint64][]int{}
	for wi, c := range keys {
		syms := make([]int, len(c))
		for i := 0; i < len(c); i++ {
			syms[i] = int(c[i])
		}
		words = append(words, word{syms, counts[c]})
		for i := 0; i+1 < len(syms); i++ {
			k := pairKey(syms[i], syms[i+1])
			pairs[k] += counts[c]
			where[k] = append(where[k], wi)
		}
	}
	h := &pairHeap{}
	for k, c := range pairs {
		*h = append(*h, pairCount{k, c})
	}
	heap.Init(h)
	for len(t.order) < nMerges && h.Len() > 0 {
		if len(t.order)%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		top := heap.Pop(h).(pairCount)
		if cur := pairs[top.key]; cur != top.count {
			if cur > 0 {
				heap.Push(h, pairCount{top.key, cur}) // stale entry: requeue with the live count
			}
			continue
		}
		if top.count < 2 {
			break // nothing left worth merging
		}
		a, b := int(top.key>>32), int(uint32(top.key))
		id := t.addToken(t.tokens[a]+t.tokens[b], false)
		t.merges[top.key] = merge{rank: len(t.order), id: id}
		t.order = append(t.order, [2]int{a, b})
		touched := map[uint64]bool{}
		seen := map[int]bool{}
		for _, wi := range where[top.key] {
			if seen[wi] {
				continue
			}
			seen[wi] = true
			w := &words[wi]
			s := w.syms
			found := false
			for i := 0; i+1 < len(s); i++ {
				if s[i] == a && s[i+1] == b {
					found = true
					break
				}
			}
			if !found {
				continue
			}
			for i := 0; i+1 < len(s); i++ {
				pairs[pairKey(s[i], s[i+1])] -= w.count
				touched[pairKey(s[i], s[i+1])] = true
			}
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == a && s[i+1] == b {
					out = append(out, id)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			w.syms = out
			for i := 0; i+1 < len(out); i++ {
				k := pairKey(out[i], out[i+1])
				pairs[k] += w.count
				touched[k] = true
				if out[i] == id || out[i+1] == id {
					where[k] = append(where[k], wi)
				}
			}
		}
		delete(where, top.key)
		for k := range touched {
			if c := pairs[k]; c > 0 {
				heap.Push(h, pairCount{k, c})
			} else {
				delete(pairs, k)
			}
		}
	}
	for _, s := range specials {
		t.addToken(s, true)
	}
	return t, nil
}

type pairCount struct {
	key   uint64
	count int
}

type pairHeap []pairCount

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	return h[i].key < h[j].key
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// --- Hugging Face tokenizer.json ---

// byteToRune is GPT-2's printable mapping of bytes used in tokenizer.json.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

func toHF(raw string) string {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		b.WriteRune(byteToRune[raw[i]])
	}
	return b.String()
}

func fromHF(s string) (string, error) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := runeToByte[r]
		if !ok {
			return "", fmt.Errorf("character %q is not in the byte-level alphabet", r)
		}
		b = append(b, c)
	}
	return string(b), nil
}

type hfAdded struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfPre struct {
	Type           string          `json:"type"`
	AddPrefixSpace *bool           `json:"add_prefix_space,omitempty"`
	TrimOffsets    *bool           `json:"trim_offsets,omitempty"`
	UseRegex       *bool           `json:"use_regex,omitempty"`
	Pattern        *hfPattern      `json:"pattern,omitempty"`
	Behavior       string          `json:"behavior,omitempty"`
	Invert         *bool           `json:"invert,omitempty"`
	Pretokenizers  []hfPre         `json:"pretokenizers,omitempty"`
	Extra          json.RawMessage `json:"-"`
}

type hfPattern struct {
	Regex  string `json:"Regex,omitempty"`
	String string `json:"String,omitempty"`
}

type hfFile struct {
	Version       string          `json:"version"`
	Truncation    any             `json:"truncation"`
	Padding       any             `json:"padding"`
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  *hfPre          `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string          `json:"type"`
		Dropout                 any             `json:"dropout"`
		UnkToken                any             `json:"unk_token"`
		ContinuingSubwordPrefix any             `json:"continuing_subword_prefix"`
		EndOfWordSuffix         any             `json:"end_of_word_suffix"`
		FuseUnk                 bool            `json:"fuse_unk"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges,omitempty"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

func boolp(b bool) *bool { return &b }

// MarshalJSON writes the tokenizer in Hugging Face's tokenizer.json format.
func (t *Tokenizer) MarshalJSON() ([]byte, error) {
	var f hfFile
	f.Version = "1.0"
	f.Normalizer = json.RawMessage("null")
	if t.normalizer != nil {
		f.Normalizer = t.normalizer
	}
	f.PostProcessor = json.RawMessage("null")
	f.Decoder = json.RawMessage(`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`)
	bl := hfPre{Type: "ByteLevel", AddPrefixSpace: boolp(t.prefixSpace), TrimOffsets: boolp(true), UseRegex: boolp(t.gpt2Style)}
	if t.gpt2Style {
		f.PreTokenizer = &bl
	} else {
		f.PreTokenizer = &hfPre{Type: "Sequence", Pretokenizers: []hfPre{
			{Type: "Split", Pattern: &hfPattern{Regex: t.pattern}, Behavior: "Isolated", Invert: boolp(false)}, bl}}
	}
	f.Model.Type = "BPE"
	f.Model.IgnoreMerges = t.ignoreMerges
	f.Model.Vocab = map[string]int{}
	for id, s := range t.tokens {
		if t.special[id] {
			f.AddedTokens = append(f.AddedTokens, hfAdded{ID: id, Content: s, Special: true})
		} else {
			f.Model.Vocab[toHF(s)] = id
		}
	}
	merges := make([][2]string, len(t.order))
	for i, m := range t.order {
		merges[i] = [2]string{toHF(t.tokens[m[0]]), toHF(t.tokens[m[1]])}
	}
	var err error
	if f.Model.Merges, err = json.Marshal(merges); err != nil {
		return nil, err
	}
	return json.MarshalIndent(f, "", "  ")
}

// ParseTokenizerJSON reads a Hugging Face tokenizer.json of a byte-level BPE
// (GPT-2, Llama-3, Qwen2 and ours). Qwen2's NFC normalizer is applied;
// other normalizers are refused. Post-processors (e.g. Llama-3 adding BOS)
// are not applied: the caller writes the template's tokens.
func ParseTokenizerJSON(data []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model.type %q, only BPE is supported", f.Model.Type)
	}
	if f.Model.ByteFallback {
		return nil, fmt.Errorf("tokenizer.json: model.byte_fallback (sentencepiece-style BPE) is not supported")
	}
	pattern, prefix, gpt2, err := readPre(f.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer: %w", err)
	}
	t, err := newTokenizer(pattern)
	if err != nil {
		return nil, err
	}
	t.prefixSpace, t.gpt2Style, t.ignoreMerges = prefix, gpt2, f.Model.IgnoreMerges
	if n := strings.TrimSpace(string(f.Normalizer)); n != "" && n != "null" {
		var nt struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(f.Normalizer, &nt); err != nil {
			return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
		}
		if nt.Type != "NFC" {
			return nil, fmt.Errorf("tokenizer.json: normalizer %q is not supported (only NFC)", nt.Type)
		}
		t.nfc, t.normalizer = true, f.Normalizer
	}
	size := 0
	for _, id := range f.Model.Vocab {
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	t.tokens = make([]string, size)
	t.special = make([]bool, size)
	for s, id := range f.Model.Vocab {
		raw, err := fromHF(s)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: vocab entry %q: %w", s, err)
		}
		if id < 0 {
			return nil, fmt.Errorf("tokenizer.json: vocab entry %q has id %d", s, id)
		}
		t.tokens[id] = raw
		t.vocab[raw] = id
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("tokenizer.json: added token %q has id %d", a.Content, a.ID)
		}
		t.tokens[a.ID] = a.Content
		t.special[a.ID] = true
		t.specials[a.Content] = a.ID
		delete(t.vocab, a.Content)
	}
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("tokenizer.json: vocab lacks the single byte 0x%02x", b)
		}
		t.byteID[b] = id
	}
	// Merges are "a b" strings in older files and [a, b] pairs in newer ones.
	var raw []json.RawMessage
	if err := json.Unmarshal(f.Model.Merges, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer.json: model.merges: %w", err)
	}
	pairs := make([][2]string, len(raw))
	for i, r := range raw {
		var s string
		if err := json.Unmarshal(r, &s); err == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("tokenizer.json: merge %d %q is not two tokens", i, s)
			}
			pairs[i] = [2]string{a, b}
		} else if err := json.Unmarshal(r, &pairs[i]); err != nil {
			return nil, fmt.Errorf("tokenizer.json: merge %d: %w", i, err)
		}
	}
	for rank, p := range pairs {
		a, errA := fromHF(p[0])
		b, errB := fromHF(p[1])
		if errA != nil || errB != nil {
			return nil, fmt.Errorf("tokenizer.json: merge %d %q: not byte-level", rank, p)
		}
		ia, okA := t.vocab[a]
		ib, okB := t.vocab[b]
		id, okM := t.vocab[a+b]
		if !okA || !okB || !okM {
			return nil, fmt.Errorf("tokenizer.json: merge %d %q: token missing from vocab", rank, p)
		}
		if _, dup := t.merges[pairKey(ia, ib)]; !dup {
			t.merges[pairKey(ia, ib)] = merge{rank: rank, id: id}
		}
		t.order = append(t.order, [2]int{ia, ib})
	}
	return t, nil
}

func readPre(p *hfPre) (pattern string, prefix, gpt2 bool, err error) {
	if p == nil {
		return "", false, false, fmt.Errorf("missing (a byte-level pre-tokenizer is required)")
	}
	switch p.Type {
	case "ByteLevel":
		if p.UseRegex != nil && !*p.UseRegex {
			return "", false, false, fmt.Errorf("ByteLevel without a split regex is not supported")
		}
		return GPT2Pattern, p.AddPrefixSpace != nil && *p.AddPrefixSpace, true, nil
	case "Sequence":
		byteLevel := false
		for _, q := range p.Pretokenizers {
			switch q.Type {
			case "Split":
				if pattern != "" {
					return "", false, false, fmt.Errorf("more than one Split is not supported")
				}
				if q.Pattern == nil || q.Pattern.Regex == "" {
					return "", false, false, fmt.Errorf("Split without a Regex pattern is not supported")
				}
				if q.Behavior != "Isolated" || (q.Invert != nil && *q.Invert) {
					return "", false, false, fmt.Errorf("Split behavior %q invert=%v is not supported", q.Behavior, q.Invert)
				}
				pattern = q.Pattern.Regex
			case "ByteLevel":
				byteLevel = true
				prefix = q.AddPrefixSpace != nil && *q.AddPrefixSpace
				if q.UseRegex != nil && *q.UseRegex {
					if pattern != "" {
						return "", false, false, fmt.Errorf("Split followed by ByteLevel(use_regex) is not supported")
					}
					pattern, gpt2 = GPT2Pattern, true
				}
			default:
				return "", false, false, fmt.Errorf("pre-tokenizer %q is not supported", q.Type)
			}
		}
		if !byteLevel || pattern == "" {
			return "", false, false, fmt.Errorf("need a Split regex and a ByteLevel step")
		}
		return pattern, prefix, gpt2, nil
	}
	return "", false, false, fmt.Errorf("type %q is not supported", p.Type)
}

// Save writes tokenizer.json atomically.
func (t *Tokenizer) Save(path string) error {
	data, err := t.MarshalJSON()
	if err != nil {
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	if err := durable.ReplaceFile(path, data); err != nil {
		return fmt.Errorf("save tokenizer: %w", err)
	}
	return nil
}

// LoadTokenizer reads a Hugging Face tokenizer.json.
func LoadTokenizer(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := ParseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return t, nil
}
