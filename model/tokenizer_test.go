package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// corpus makes code-, issue- and diff-like text, deterministic in seed.
func corpus(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"def", "return", "self", "import", "class", "if", "else", "for", "in", "None", "True",
		"value", "result", "items", "config", "parse", "error", "raise", "ValueError", "len", "range", "print",
		"the", "function", "fails", "when", "input", "is", "empty", "expected", "should", "über", "naïve", "数据"}
	var docs []string
	for i := 0; i < n; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "diff --git a/pkg/mod%d.py b/pkg/mod%d.py\n@@ -%d,%d +%d,%d @@\n", i, i, i, 7, i, 8)
		for l := 0; l < 12; l++ {
			b.WriteString([]string{"+", "-", " "}[r.IntN(3)])
			b.WriteString(strings.Repeat("    ", r.IntN(3)))
			for w := 0; w < 2+r.IntN(6); w++ {
				b.WriteString(words[r.IntN(len(words))])
				b.WriteString([]string{" ", "(", ")", ".", ", ", " = ", ":"}[r.IntN(7)])
			}
			fmt.Fprintf(&b, "%d\n", r.IntN(1000))
		}
		docs = append(docs, b.String())
	}
	return docs
}

func TestTrainBPERoundTripAndSpecials(t *testing.T) {
	docs := corpus(1, 300)
	tok, err := TrainBPE(context.Background(), slices.Values(docs), 600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 600 {
		t.Fatalf("vocab size %d, want 600", tok.VocabSize())
	}
	r := rand.New(rand.NewPCG(5, 5))
	randomBytes := make([]byte, 3000)
	for i := range randomBytes {
		randomBytes[i] = byte(r.IntN(256))
	}
	cases := []string{
		docs[0], docs[299], "", " ", "\n\n\t  x", "数据 über naïve 🙂",
		string(randomBytes), "\xff\xfe invalid \xc3 utf8 \xe2\x82", "<|im_start|>user\nfix it<|im_end|>\n",
		"<|im_end|<|im_end|><|endoftext|>",
	}
	for i, s := range cases {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("case %d: round trip changed %q into %q", i, s, got)
		}
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("case %d: id %d outside vocab", i, id)
			}
		}
	}
	ids := tok.Encode("<|im_start|>user\nhi<|im_end|>")
	start, _ := tok.SpecialID(ImStart)
	end, _ := tok.SpecialID(ImEnd)
	if ids[0] != start || ids[len(ids)-1] != end || !tok.IsSpecial(start) {
		t.Fatalf("chat template encodes to %v; want %d ... %d", ids, start, end)
	}
	if plain := tok.EncodeOrdinary(ImEnd); len(plain) < 2 {
		t.Fatalf("EncodeOrdinary(%q) = %v; want ordinary tokens", ImEnd, plain)
	}
	var nbytes, ntok int
	for _, d := range docs[:50] {
		nbytes += len(d)
		ntok += len(tok.Encode(d))
	}
	if ratio := float64(nbytes) / float64(ntok); ratio < 2.5 {
		t.Errorf("compression %.2f bytes/token on the training corpus; want >= 2.5", ratio)
	}
}

func TestTrainBPEIsFast(t *testing.T) {
	n := 6000 // ≈ 3 MB
	if testing.Short() {
		n = 2000
	}
	docs := corpus(2, n)
	size := 0
	for _, d := range docs {
		size += len(d)
	}
	start := time.Now()
	tok, err := TrainBPE(context.Background(), slices.Values(docs), 2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("trained a %d-token BPE on %.1f MB in %v", tok.VocabSize(), float64(size)/1e6, el)
	if el > 60*time.Second {
		t.Errorf("training took %v; want seconds", el)
	}
	again, err := TrainBPE(context.Background(), slices.Values(docs[:200]), 400, nil)
	if err != nil {
		t.Fatal(err)
	}
	again2, _ := TrainBPE(context.Background(), slices.Values(docs[:200]), 400, nil)
	a, _ := again.MarshalJSON()
	b, _ := again2.MarshalJSON()
	if string(a) != string(b) {
		t.Error("two trainings on the same corpus differ")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := TrainBPE(ctx, slices.Values(docs), 2048, nil); err == nil {
		t.Error("TrainBPE ignored a cancelled context")
	}
	if _, err := TrainBPE(context.Background(), slices.Values(docs), 100, nil); err == nil {
		t.Error("TrainBPE accepted a vocab smaller than 256 bytes")
	}
}

func TestTokenizerSaveLoad(t *testing.T) {
	docs := corpus(3, 100)
	tok, err := TrainBPE(context.Background(), slices.Values(docs), 500, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(docs[:5], "<|im_start|>x<|im_end|>", "\x00\xff ü") {
		if a, b := tok.Encode(s), back.Encode(s); !slices.Equal(a, b) {
			t.Fatalf("encodings differ after save/load for %q:\n%v\n%v", s, a, b)
		}
	}
	j1, _ := tok.MarshalJSON()
	j2, _ := back.MarshalJSON()
	if string(j1) != string(j2) {
		t.Error("tokenizer.json differs after a load/save cycle")
	}
	if _, err := LoadTokenizer(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("loading a missing file succeeded")
	}
}

// hfTokenizerJSON builds a tokenizer.json the way Hugging Face writes the
// named family: all 256 byte tokens, the given merges, and specials.
func hfTokenizerJSON(t *testing.T, family string, merges [][2]string, specials []string) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	var mergeJSON any
	var flat []string
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
		flat = append(flat, m[0]+" "+m[1])
	}
	var added []map[string]any
	for _, s := range specials {
		id := len(vocab)
		if family == "gpt2" {
			vocab[s] = id // GPT-2 keeps <|endoftext|> in the vocab too
		} else {
			id = len(vocab) + len(added)
		}
		added = append(added, map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	var pre, normalizer any
	if family == "qwen2" {
		normalizer = map[string]any{"type": "NFC"}
	}
	switch family {
	case "gpt2":
		mergeJSON = flat
		pre = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	default: // llama3 / qwen2: Split + ByteLevel(use_regex=false), merges as pairs in newer files
		mergeJSON = merges
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": Llama3Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}
	}
	f := map[string]any{"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": normalizer, "pre_tokenizer": pre, "post_processor": nil,
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "fuse_unk": false,
			"byte_fallback": false, "vocab": vocab, "merges": mergeJSON, "ignore_merges": family == "llama3"}}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestLoadHuggingFaceTokenizers(t *testing.T) {
	// Ġ is the byte-level rendering of a space, Ċ of a newline.
	merges := [][2]string{{"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"}, {"H", "e"}, {"l", "l"}, {"He", "ll"}, {"Hell", "o"}}
	cases := []struct {
		family   string
		special  string
		text     string
		want     []string
		chunksOf string
		chunks   []string
	}{
		{"gpt2", "<|endoftext|>", "Hello world<|endoftext|>", []string{"Hello", " world", "<|endoftext|>"},
			"a   b\n\nc's", []string{"a", "  ", " b", "\n", "\n", "c", "'s"}},
		{"llama3", "<|begin_of_text|>", "<|begin_of_text|>Hello world!!\n", []string{"<|begin_of_text|>", "Hello", " world", "!", "!", "\n"},
			"x   1234\n\n  y", []string{"x", "  ", " ", "123", "4", "\n\n", " ", " y"}},
		{"qwen2", "<|im_end|>", "Hello\n world<|im_end|>e\u0301", []string{"Hello", "\n", " world", "<|im_end|>", "\u00e9"[:1], "\u00e9"[1:]},
			"if(a):\n\treturn", []string{"if", "(a", "):\n", "\treturn"}},
	}
	for _, tc := range cases {
		t.Run(tc.family, func(t *testing.T) {
			tok, err := ParseTokenizerJSON(hfTokenizerJSON(t, tc.family, merges, []string{tc.special}))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, id := range tok.Encode(tc.text) {
				got = append(got, tok.Token(id))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode(%q) = %q, want %q", tc.text, got, tc.want)
			}
			if chunks := tok.split(tc.chunksOf); !slices.Equal(chunks, tc.chunks) {
				t.Errorf("split(%q) = %q, want %q", tc.chunksOf, chunks, tc.chunks)
			}
			if _, ok := tok.SpecialID(tc.special); !ok {
				t.Errorf("special %q not exposed", tc.special)
			}
		})
	}
	bad := []struct {
		name string
		edit func(map[string]any)
	}{
		{"wordpiece", func(f map[string]any) { f["model"].(map[string]any)["type"] = "WordPiece" }},
		{"no-pretokenizer", func(f map[string]any) { f["pre_tokenizer"] = nil }},
		{"nfkc", func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"merge-not-in-vocab", func(f map[string]any) {
			f["model"].(map[string]any)["merges"] = []string{"Ġ zz"}
		}},
	}
	for _, b := range bad {
		var f map[string]any
		if err := json.Unmarshal(hfTokenizerJSON(t, "gpt2", merges, nil), &f); err != nil {
			t.Fatal(err)
		}
		b.edit(f)
		data, _ := json.Marshal(f)
		if _, err := ParseTokenizerJSON(data); err == nil {
			t.Errorf("%s: parsed without error", b.name)
		}
	}
}

// Llama-3's ignore_merges: a chunk that is itself in the vocab is one token
// even when no merge path builds it.
func TestIgnoreMerges(t *testing.T) {
	for _, ignore := range []bool{true, false} {
		var f map[string]any
		if err := json.Unmarshal(hfTokenizerJSON(t, "llama3", nil, nil), &f); err != nil {
			t.Fatal(err)
		}
		mdl := f["model"].(map[string]any)
		mdl["vocab"].(map[string]any)["Ġxyz"] = 256
		mdl["ignore_merges"] = ignore
		data, _ := json.Marshal(f)
		tok, err := ParseTokenizerJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Encode(" xyz")
		if want := map[bool]int{true: 1, false: 4}[ignore]; len(got) != want {
			t.Errorf("ignore_merges=%v: Encode(\" xyz\") = %v; want %d tokens", ignore, got, want)
		}
	}
}
