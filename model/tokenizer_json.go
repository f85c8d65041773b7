package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/swetui/swetui/internal/durable"
)

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
