package model

import (
	"container/heap"
	"context"
	"fmt"
	"iter"
	"sort"
	"strings"
)

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

func (h *pairHeap) Push(x any) { *h = append(*h, x.(pairCount)) }

func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
