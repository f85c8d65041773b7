package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/serve"
)

// BenchmarkServeOverhead is the cost of a request through `swetui serve`
// over the scorer call `swetui score` makes for the same patch (the
// embedded suite's gold patches, one a request, one request at a time):
// per phase, score is reward.Scorer.ScoreDiffs as app.ScoreOne calls it, serve
// is POST /v1/score on loopback to a server over that scorer, its cache
// off (no_cache), and cached is the same request answered from the cache.
//
//	go test ./cli -run '^$' -bench 'ServeOverhead/(syntax|apply-only)' -benchtime 500x
//	go test ./cli -run '^$' -bench 'ServeOverhead/docker' -benchtime 16x
func BenchmarkServeOverhead(b *testing.B) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.Data.MiniTasks = 16
	ws, err := app.OpenTasks(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	scorer, pool, dockerErr := ws.Rewards(ctx, "bench-serve-"+sandbox.NewNonce()[:6], event.Discard)
	defer scorer.Close()
	defer app.ClosePool(ctx, pool)
	opts := serve.FromConfig(cfg.Serve, cfg.Sandbox.Workers)
	opts.Scorer, opts.Tasks, opts.DockerErr = scorer, ws.Tasks, dockerErr
	srv, err := serve.New("127.0.0.1:0", opts)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	defer func() { stop(); <-done }()
	url := "http://" + l.Addr().String() + "/v1/score"
	post := func(b *testing.B, i int, phase string, noCache bool) {
		in := ws.Tasks[i%len(ws.Tasks)]
		body, _ := json.Marshal(serve.ScoreRequest{InstanceID: in.InstanceID, Patches: []string{in.Patch}, Phase: phase, NoCache: noCache})
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var out serve.ScoreResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(out.Verdicts) != 1 || !out.Verdicts[0].SyntaxOK {
			b.Fatalf("%d %v %+v", resp.StatusCode, err, out)
		}
	}
	for _, phase := range config.Phases {
		if phase == config.PhaseDocker && dockerErr != nil {
			b.Logf("docker phase skipped: %v", dockerErr)
			continue
		}
		b.Run(phase+"/score", func(b *testing.B) {
			for i := range b.N {
				in := ws.Tasks[i%len(ws.Tasks)]
				vs, err := scorer.ScoreDiffs(ctx, in, []string{in.Patch}, phase)
				if err != nil || !vs[0].SyntaxOK {
					b.Fatal(err, vs)
				}
			}
		})
		b.Run(phase+"/serve", func(b *testing.B) {
			for i := range b.N {
				post(b, i, phase, true)
			}
		})
		b.Run(phase+"/cached", func(b *testing.B) {
			for i := range b.N {
				post(b, i, phase, false)
			}
		})
	}
}
