package policy

import (
	"github.com/swetui/swetui/internal/snapshot"
	"github.com/swetui/swetui/model"
)

// Snaps exposes a policy's snapshots to the external tests.
func Snaps(p *Model) *snapshot.Set[*model.Model] { return &p.snaps }

// TurnsCached says how many tokens each of the policy's kept agent
// trajectories holds in its cache.
func TurnsCached(p *Model) []int {
	p.turns.mu.Lock()
	defer p.turns.mu.Unlock()
	var n []int
	if p.turns.gen == nil {
		return nil
	}
	for _, cv := range p.turns.gen.convs {
		n = append(n, cv.Cached())
	}
	return n
}
