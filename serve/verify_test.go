package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/swetui/swetui/task"
)

// lengthVerifier scores a patch by its length over 10, or fails.
type lengthVerifier struct{ err error }

func (v lengthVerifier) Verify(_ context.Context, _ *task.Instance, patches []string) ([]float64, error) {
	out := make([]float64, len(patches))
	for i, p := range patches {
		out[i] = float64(len(p)) / 10
	}
	return out, v.err
}

// POST /v1/verify scores patches with the server's verifier and runs
// none; bad input is the score request's clear 4xx; a server without a
// verifier says how to start one; /v1/score answers each verdict's score.
func TestVerify(t *testing.T) {
	ts := startServer(t, &fakeScorer{}, func(o *Options) {
		o.Verifier = lengthVerifier{}
		o.DockerErr = errors.New("no Docker host answers") // a verify runs nothing: it needs none
	})
	plain := startServer(t, &fakeScorer{}, nil)
	failing := startServer(t, &fakeScorer{}, func(o *Options) { o.Verifier = lengthVerifier{err: errors.New("device lost")} })
	var got VerifyResponse
	a := do(t, http.MethodPost, ts.url+"/v1/verify", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"ab", "abcde"}})
	if a.code != 200 {
		t.Fatalf("verify: %d %s", a.code, a.body)
	}
	a.decode(t, &got)
	if got.InstanceID != "acme__widget-1" || len(got.Scores) != 2 || got.Scores[0] != 0.2 || got.Scores[1] != 0.5 || ts.scorer.calls.Load() != 0 {
		t.Errorf("verify: %+v, %d scorer calls", got, ts.scorer.calls.Load())
	}
	for _, tt := range []struct {
		name   string
		ts     *testServer
		method string
		body   any
		want   int
		says   string
	}{
		{"not JSON", ts, "POST", "{", 400, "request body"},
		{"no patches", ts, "POST", ScoreRequest{InstanceID: "acme__widget-1"}, 400, "no patches"},
		{"unknown instance", ts, "POST", ScoreRequest{InstanceID: "nope", Patches: []string{"x"}}, 404, "not in the dataset"},
		{"GET", ts, "GET", nil, 405, "POST a verify request"},
		{"no verifier", plain, "POST", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}}, 404, "--verifier DIR"},
		{"the verifier fails", failing, "POST", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"x"}}, 500, ""},
	} {
		a := do(t, tt.method, tt.ts.url+"/v1/verify", "", tt.body)
		if a.code != tt.want || !strings.Contains(string(a.body), tt.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tt.name, a.code, a.body, tt.want, tt.says)
		}
	}
	var scored ScoreResponse
	a = do(t, http.MethodPost, ts.url+"/v1/score", "", ScoreRequest{InstanceID: "acme__widget-1", Patches: []string{"abc"}, Phase: "apply-only"})
	a.decode(t, &scored)
	if a.code != 200 || len(scored.VerifierScores) != 1 || scored.VerifierScores[0] != 0.3 || len(scored.Verdicts) != 1 {
		t.Errorf("score with a verifier: %d %+v", a.code, scored)
	}
}
