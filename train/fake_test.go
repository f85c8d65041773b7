package train

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// banditPolicy is a real, tiny policy for testing the loop: a softmax over K
// one-token completions with logits θ, trained by plain SGD. Its gradients are
// exact (∂ log p_k / ∂θ_j = 1[j=k] - p_j), so GRPO's effect on it is the
// algorithm's, not a fixture's.
type banditPolicy struct {
	mu      sync.Mutex
	Theta   []float64
	grad    []float64
	LR      float64
	Updates int
	pcg     *rand.PCG
	rng     *rand.Rand
}

func newBandit(k int, lr float64, seed uint64) *banditPolicy {
	pcg := rand.NewPCG(seed, 1)
	return &banditPolicy{Theta: make([]float64, k), grad: make([]float64, k), LR: lr, pcg: pcg, rng: rand.New(pcg)}
}

func (b *banditPolicy) probs() []float64 {
	p := make([]float64, len(b.Theta))
	max := math.Inf(-1)
	for _, x := range b.Theta {
		max = math.Max(max, x)
	}
	sum := 0.0
	for i, x := range b.Theta {
		p[i] = math.Exp(x - max)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

func (b *banditPolicy) Sample(ctx context.Context, prompt []int, n int, opts SampleOptions) ([]Sample, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.probs()
	out := make([]Sample, n)
	for i := range out {
		u, k := b.rng.Float64(), 0
		for k < len(p)-1 && u > p[k] {
			u -= p[k]
			k++
		}
		out[i] = Sample{Tokens: []int{k}, Logprobs: []float64{math.Log(p[k])}}
	}
	return out, nil
}

func (b *banditPolicy) Logprobs(ctx context.Context, seqs []Sequence) ([][]float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.probs()
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		out[i] = []float64{math.Log(p[s.Completion[0]])}
	}
	return out, nil
}

func (b *banditPolicy) Backward(ctx context.Context, seqs []Sequence, cot [][]float64) ([][]float64, float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.probs()
	logp := make([][]float64, len(seqs))
	for i, s := range seqs {
		logp[i] = []float64{math.Log(p[s.Completion[0]])}
		k := s.Completion[0]
		for j := range b.grad {
			ind := 0.0
			if j == k {
				ind = 1
			}
			b.grad[j] += cot[i][0] * (ind - p[j])
		}
	}
	h := 0.0
	for _, q := range p {
		h -= q * math.Log(q)
	}
	return logp, h, nil
}

func (b *banditPolicy) Step() (float64, float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	norm := 0.0
	for j, g := range b.grad {
		norm += g * g
		b.Theta[j] -= b.LR * g
		b.grad[j] = 0
	}
	b.Updates++
	return math.Sqrt(norm), b.LR
}

func (b *banditPolicy) Version() int { return b.Updates }

type banditState struct {
	Theta   []float64
	Updates int
	RNG     []byte
}

func (b *banditPolicy) Save(ctx context.Context, dir string) error {
	rng, _ := b.pcg.MarshalBinary()
	data, _ := json.Marshal(banditState{b.Theta, b.Updates, rng})
	return os.WriteFile(filepath.Join(dir, "bandit.json"), data, 0o644)
}

func (b *banditPolicy) Load(ctx context.Context, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "bandit.json"))
	if err != nil {
		return err
	}
	var st banditState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	b.Theta, b.Updates = st.Theta, st.Updates
	return b.pcg.UnmarshalBinary(st.RNG)
}

// digitTokenizer renders token k as its decimal digits, space-separated.
type digitTokenizer struct{}

func (digitTokenizer) Encode(s string) []int { return []int{len(s) % 7} }
func (digitTokenizer) Decode(toks []int) string {
	out := ""
	for _, t := range toks {
		out += strconv.Itoa(t)
	}
	return out
}

// rewardFunc scores a completion's text.
type rewardFunc func(text string) event.Verdict

func (f rewardFunc) Score(ctx context.Context, inst *task.Instance, completions []string, phase string) ([]event.Verdict, error) {
	out := make([]event.Verdict, len(completions))
	for i, c := range completions {
		out[i] = f(c)
	}
	return out, nil
}

type staticPrompter struct{}

func (staticPrompter) Prompt(ctx context.Context, inst *task.Instance) (string, error) {
	return "fix " + inst.InstanceID, nil
}

func fakeTasks(n int) []*task.Instance {
	out := make([]*task.Instance, n)
	for i := range out {
		out[i] = &task.Instance{InstanceID: "t" + strconv.Itoa(i)}
	}
	return out
}
