package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/swetui/swetui/app"
	"github.com/swetui/swetui/config"
	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/sandbox"
	"github.com/swetui/swetui/serve"
	"github.com/swetui/swetui/task"
	"github.com/swetui/swetui/train"
	"github.com/swetui/swetui/ui"
)

// serveOptions are `swetui serve`'s inputs.
type serveOptions struct {
	Config   config.Config // [serve], the dataset (data.source), [reward] and [sandbox]
	Headless bool          // the line printer even on a terminal
	Verifier string        // a verifier's folder: its score beside each verdict, and /v1/verify
	// listener replaces listening on serve.addr (tests).
	listener net.Listener
}

func newServeOptions(env Env, args []string) (serveOptions, error) {
	fs := newFlags(env, "serve")
	load := configFlag(fs, env)
	addr := fs.String("addr", "", "listen address host:port (default serve.addr, 127.0.0.1:8765); one that is not loopback needs a token")
	dataset := fs.String("dataset", "", "dataset file (.jsonl, .json, .parquet) or mini (default: data.source)")
	tokenFile := fs.String("token-file", "", "file holding the bearer token clients must send (default serve.token_file, else $"+serve.TokenEnv+")")
	headless := fs.Bool("headless", false, "no console: one line per request on stdout")
	ver := fs.String("verifier", "", "a verifier's folder (swetui verifier train): its score beside each verdict, and POST /v1/verify")
	cfg, _, err := parseAndLoad(fs, load, args)
	if err != nil {
		return serveOptions{}, err
	}
	if *addr != "" {
		if _, _, err := net.SplitHostPort(*addr); err != nil {
			return serveOptions{}, UsageErrorf("--addr %q: want host:port (127.0.0.1:8765)", *addr)
		}
		cfg.Serve.Addr = *addr
	}
	if *dataset != "" {
		cfg.Data.Source = *dataset
	}
	if *tokenFile != "" {
		cfg.Serve.TokenFile = *tokenFile
	}
	return serveOptions{Config: cfg, Headless: *headless, Verifier: *ver}, nil
}

// serveRun implements `swetui serve`: the reward engine over HTTP, with
// the console's panes on a terminal or a line per request.
func serveRun(ctx context.Context, env Env, o serveOptions) error {
	cfg := o.Config
	token, err := serve.Token(cfg.Serve)
	if errors.Is(err, serve.ErrEmptyTokenFile) {
		return UsageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	addr := cfg.Serve.Addr
	if o.listener != nil {
		addr = o.listener.Addr().String()
	}
	// Refused before anything is loaded or listened on.
	if token == "" && !serve.IsLoopback(addr) {
		return UsageErrorf("--addr %s: %v", addr, serve.ErrNeedToken)
	}
	// Listening first: a port in use fails before the dataset and the pool
	// are loaded (connections wait in the backlog until Serve).
	l := o.listener
	if l == nil {
		if l, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	defer l.Close()
	addr = l.Addr().String() // port 0 resolved: the console's title, the listening line
	ws, err := app.OpenTasks(ctx, cfg)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// The run's containers carry its id; a nonce keeps two servers started
	// in the same second apart.
	runID := cfg.Run.Name
	if runID == "" {
		runID = time.Now().Format("serve-20060102-150405-") + sandbox.NewNonce()[:6]
	}

	// The console gets the pool's logs and state and the server's steps on
	// one bus; headless, the pool's and the server's messages are printed.
	tui := env.IsTerminal && !o.Headless
	var events event.Publisher = &messagePrinter{w: env.Stdout, start: time.Now()}
	var bus *event.Bus
	var sub *event.Sub
	if tui {
		bus = event.NewBus()
		defer bus.Close()
		sub = bus.Subscribe(train.EventBuffer)
		events = bus
	}
	scorer, pool, dockerErr := ws.Rewards(ctx, runID, events) // reaps what dead runs left on the hosts
	defer scorer.Close()
	defer app.ClosePool(ctx, pool) // after the server has stopped: removes this run's containers

	opts := serve.FromConfig(cfg.Serve, cfg.Sandbox.Workers)
	opts.Scorer, opts.Tasks, opts.Token, opts.Events, opts.Hosts = scorer, ws.Tasks, token, events, sandbox.ParseHosts(cfg.Sandbox.Hosts).Shown()
	opts.RequestLines = !tui
	if cfg.Serve.InlineInstances {
		opts.Decode = func(b []byte) (task.Instance, error) { return task.DecodeInstance(b, cfg) }
	}
	docker := "docker up"
	if dockerErr != nil {
		opts.DockerErr = dockerErr
		docker = fmt.Sprintf("docker unavailable (%v): syntax and apply-only only", dockerErr)
	} else {
		opts.Pool = pool
		if cfg.Serve.MaxSessions > 0 {
			opts.OpenSession, opts.Sessions = app.ServeSessions(cfg, pool), serve.SessionsFromConfigs(cfg.Serve, cfg.Agent)
		}
		if n := pool.Reaped(); n > 0 {
			docker += fmt.Sprintf(", reaped %d containers left by earlier runs", n)
		}
	}
	if o.Verifier != "" {
		v, err := app.OpenVerifier(ctx, cfg, o.Verifier)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer v.Close()
		opts.Verifier = v
	}
	srv, err := serve.New(addr, opts)
	if err != nil {
		return UsageErrorf("%v", err)
	}
	auth := "no token (loopback only)"
	if token != "" {
		auth = "bearer token required"
	}
	fmt.Fprintf(env.Stdout, "swetui serve: listening on http://%s (run %s, %d tasks of %s, %s, %s)\n",
		l.Addr(), runID, len(ws.Tasks), cfg.Data.Source, auth, docker)

	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	if tui {
		uiErr := ui.Run(ctx, srv, sub.Events(), ui.Options{UI: cfg.UI, Drops: sub.Dropped, Input: env.Stdin, Output: env.Stdout})
		srv.Stop()
		sub.Close()
		err = <-done
		if uiErr != nil && !errors.Is(uiErr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("console: %w", uiErr))
		}
	} else {
		err = <-done
	}
	app.ClosePool(ctx, pool) // now, so that the line below is true
	fmt.Fprintf(env.Stdout, "swetui serve: stopped; the containers of run %s are removed\n", runID)
	return err
}
