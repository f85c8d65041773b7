package cuda

import (
	"fmt"
	"time"
)

// RankShare is one GPU's part of a data-parallel run so far: what the
// console shows beside the reward pool, so that a GPU that falls behind is
// seen. Times are wall time of calls that end synchronized with the
// device.
type RankShare struct {
	Device string // "cuda:1 NVIDIA H100 80GB HBM3"
	// Samples counts the sampling calls it ran (a group, or an agent's
	// turn).
	Samples int
	// Sample, Train and Collective are the time in sampling, in the
	// forward and backward passes of training (its part of each batch),
	// and in collectives (the gradients' all-reduce, ZeRO-1's broadcasts).
	Sample, Train, Collective time.Duration
	// MemUsed and MemTotal are the device's memory at its last
	// collective (0 before the first step, and on the engine's CPU kernels).
	MemUsed, MemTotal uint64
}

// rankWork is what DataParallel counts of a rank's calls.
type rankWork struct {
	samples       int
	sample, train time.Duration
}

func (p *DataParallel) sampled(r int, start time.Time) {
	d := time.Since(start)
	p.mu.Lock()
	p.work[r].samples++
	p.work[r].sample += d
	p.mu.Unlock()
}

func (p *DataParallel) trained(r int, start time.Time) {
	d := time.Since(start)
	p.mu.Lock()
	p.work[r].train += d
	p.mu.Unlock()
}

// Shares reports every rank's share so far, in rank order. It never waits
// on a device.
func (p *DataParallel) Shares() []RankShare {
	p.mu.Lock()
	work := append([]rankWork(nil), p.work...)
	p.mu.Unlock()
	out := make([]RankShare, len(p.Ranks))
	for r, rp := range p.Ranks {
		e := rp.Engine
		out[r] = RankShare{Device: rankName(e.Device(), r), Samples: work[r].samples, Sample: work[r].sample, Train: work[r].train,
			Collective: time.Duration(e.collective.Load()), MemUsed: uint64(e.memUsed.Load()), MemTotal: uint64(e.memTotal.Load())}
	}
	return out
}

// rankName names a rank's device without entering it (Info reads the
// free memory inside Do).
func rankName(d Device, r int) string {
	if c, ok := d.(*CUDADevice); ok {
		return fmt.Sprintf("cuda:%d %s", c.info.Ordinal, c.info.Name)
	}
	return fmt.Sprintf("rank %d", r)
}
