package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/swetui/swetui/task"
)

// VerifyResponse answers POST /v1/verify: the verifier's probability that
// each patch resolves the task, none of them run.
type VerifyResponse struct {
	InstanceID string    `json:"instance_id"`
	Scores     []float64 `json:"scores"`
	ElapsedS   float64   `json:"elapsed_s"`
}

// Verifier scores candidates without running them (app.Verifier).
type Verifier interface {
	Verify(ctx context.Context, inst *task.Instance, patches []string) ([]float64, error)
}

// handleVerify answers POST /v1/verify: a score request's body, scored by
// the verifier alone (no container, no cache), within the request's
// deadline; 404 on a server started without one.
func (s *Server) handleVerify(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if !methodIs(w, r, http.MethodPost, "a verify request") {
		return
	}
	if s.opts.Verifier == nil {
		writeError(w, http.StatusNotFound, "this server has no verifier: start it with swetui serve --verifier DIR")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	p, give, ok := s.takeParsed(ctx, w, r, false, "POST /v1/verify")
	if !ok {
		return
	}
	defer give()
	scores, err := s.opts.Verifier.Verify(ctx, p.inst, p.patches)
	if err != nil {
		s.refuse(ctx, w, r, fmt.Sprintf("%s: %d patches", quote(p.inst.InstanceID), len(p.patches)), err)
		return
	}
	writeJSON(w, http.StatusOK, VerifyResponse{InstanceID: p.inst.InstanceID, Scores: scores, ElapsedS: time.Since(start).Seconds()})
}
