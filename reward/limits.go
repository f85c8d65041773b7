package reward

import (
	"fmt"

	"github.com/swetui/swetui/config"
)

// PatchLimits bound what a patch may be before anything applies it: past
// any of them the patch is its own failure, with the limit named in
// Verdict.SyntaxError and Verdict.Oversize set. Without them, a diff of
// ten thousand files or ten megabytes ran the sandbox out of time while it
// applied, and came back as an infrastructure failure: masked from
// training, never cached, retried at a whole timeout each time. Zero fields
// set no limit.
type PatchLimits struct {
	Bytes int // of the diff (of the whole text, before extraction)
	Files int // files the patch touches
	Hunks int // text hunks in all
}

// PatchLimitsFrom reads reward.max_patch_*.
func PatchLimitsFrom(c config.Reward) PatchLimits {
	return PatchLimits{Bytes: c.MaxPatchKB << 10, Files: c.MaxPatchFiles, Hunks: c.MaxPatchHunks}
}

// overBytes says why a text of n bytes is over the byte limit ("" when it
// is not).
func (l PatchLimits) overBytes(n int) string {
	if l.Bytes > 0 && n > l.Bytes {
		return fmt.Sprintf("patch too large: %d bytes, over reward.max_patch_kb = %d KiB", n, l.Bytes>>10)
	}
	return ""
}

// Check says which limit p (a diff of size bytes) breaks, or "".
func (l PatchLimits) Check(p *Patch, size int) string {
	if over := l.overBytes(size); over != "" {
		return over
	}
	if l.Files > 0 && len(p.Files) > l.Files {
		return fmt.Sprintf("patch too large: %d files, over reward.max_patch_files = %d", len(p.Files), l.Files)
	}
	hunks := 0
	for _, f := range p.Files {
		hunks += f.Hunks
	}
	if l.Hunks > 0 && hunks > l.Hunks {
		return fmt.Sprintf("patch too large: %d hunks, over reward.max_patch_hunks = %d", hunks, l.Hunks)
	}
	return ""
}
