package policy

import (
	"github.com/swetui/swetui/internal/snapshot"
	"github.com/swetui/swetui/model"
)

// Snaps exposes a policy's snapshots to the external tests.
func Snaps(p *Model) *snapshot.Set[*model.Model] { return &p.snaps }
