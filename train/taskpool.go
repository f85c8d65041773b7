package train

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"sync"

	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/task"
)

// This file holds the pass-rate task pool (curriculum.task_sampler =
// "pass-rate"), after prime-rl's difficulty-filtered buffer: a task the
// policy always or never solves in the current phase gives a group with no
// reward variance, which teaches nothing, so tasks are drawn in proportion
// to how close their pass rate is to one half.

// passRateEMA is how much of a task's pass rate the newest group sets. At
// 0.5 two groups in a row that all fail take a fresh task from the edge
// weight 1 to 0.44, then 0.23, without forgetting it after one bad draw.
const passRateEMA = 0.5

// EdgeWeight is a task's draw weight for pass rate p:
//
//	w(p) = floor + (1 - floor) · 4p(1 - p)
//
// 1 at p = 1/2 (groups there have the largest reward variance), floor at
// p = 0 or 1, so no task is dropped for good.
func EdgeWeight(p, floor float64) float64 {
	return floor + (1-floor)*4*p*(1-p)
}

// PhaseSuccess says whether a verdict passes the bar of its phase: a
// well-formed diff in syntax, one that applies in apply-only, resolved in
// docker.
func PhaseSuccess(phase string, v event.Verdict) bool {
	switch phase {
	case config.PhaseApplyOnly:
		return v.Applied
	case config.PhaseDocker:
		return v.Resolved
	default:
		return v.SyntaxOK
	}
}

// TaskPool keeps each task's pass rate per phase and draws tasks weighted
// by EdgeWeight. Unseen tasks count as p = 1/2, so every task is tried
// early. It is safe for concurrent use (the async generator draws while the
// trainer observes) and is saved in checkpoints.
type TaskPool struct {
	mu sync.Mutex
	// PassRate maps phase -> instance id -> the EMA of the share of a
	// group's completions that passed the phase's bar.
	PassRate map[string]map[string]float64 `json:"pass_rate"`
}

// Observe folds one scored group into the task's pass rate.
func (p *TaskPool) Observe(phase, id string, verdicts []event.Verdict) {
	passed, n := 0, 0
	for _, v := range verdicts {
		if v.Infra {
			continue
		}
		n++
		if PhaseSuccess(phase, v) {
			passed++
		}
	}
	if n == 0 {
		return
	}
	rate := float64(passed) / float64(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.PassRate == nil {
		p.PassRate = map[string]map[string]float64{}
	}
	m := p.PassRate[phase]
	if m == nil {
		m = map[string]float64{}
		p.PassRate[phase] = m
	}
	if old, seen := m[id]; seen {
		rate = (1-passRateEMA)*old + passRateEMA*rate
	}
	m[id] = rate
}

// Draw picks a task for phase with probability proportional to its
// EdgeWeight, skipping the ids in exclude (the step's other tasks) unless
// nothing else is left. u in [0, 1) is the draw's uniform number.
func (p *TaskPool) Draw(tasks []*task.Instance, phase string, floor, u float64, exclude map[string]bool) *task.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	rates := p.PassRate[phase]
	weights := make([]float64, len(tasks))
	total := 0.0
	for i, in := range tasks {
		if exclude[in.InstanceID] {
			continue
		}
		rate, seen := rates[in.InstanceID]
		if !seen {
			rate = 0.5
		}
		weights[i] = EdgeWeight(rate, floor)
		total += weights[i]
	}
	if total == 0 { // everything excluded
		return tasks[int(u*float64(len(tasks)))%len(tasks)]
	}
	target := u * total
	for i, w := range weights {
		if target < w {
			return tasks[i]
		}
		target -= w
	}
	for i := len(tasks) - 1; i >= 0; i-- { // rounding: the last drawable task
		if weights[i] > 0 {
			return tasks[i]
		}
	}
	return tasks[len(tasks)-1]
}

// drawUniform is the pool's uniform number for the draw at a data
// position: a hash of the seed and the position, so a resumed run draws
// what the interrupted one would have from the same cursor.
func drawUniform(seed int64, cur cursor) float64 {
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(cur.Epoch))
	binary.LittleEndian.PutUint64(b[16:], uint64(cur.Pos))
	h.Write(b[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}

// MarshalJSON saves the pool under its lock: a checkpoint is written while
// the async generator may be drawing.
func (p *TaskPool) MarshalJSON() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return json.Marshal(struct {
		PassRate map[string]map[string]float64 `json:"pass_rate"`
	}{p.PassRate})
}

// pickTask advances the cursor by one draw and returns that draw's task:
// the epoch's next task, or the pool's weighted draw.
func (t *Trainer) pickTask(cur *cursor, phase string, exclude map[string]bool) *task.Instance {
	if t.cfg.Curriculum.TaskSampler != config.SamplerPassRate {
		return cur.take(t.d.Tasks, t.cfg.Run.Seed)
	}
	u := drawUniform(t.cfg.Run.Seed, *cur)
	cur.Pos++
	if cur.Pos >= len(t.d.Tasks) {
		cur.Epoch, cur.Pos = cur.Epoch+1, 0
	}
	return t.st.Pool.Draw(t.d.Tasks, phase, t.cfg.Curriculum.PoolFloor, u, exclude)
}
