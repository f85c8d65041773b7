// Package client is a Go client of `swetui serve` for Go harnesses: scoring
// patches (/v1/score), listing tasks, and agent sessions (/v1/sessions):
// open one on a task, run commands, submit its diff for a verdict. Answers
// 429 and 503 to a score or an open are retried after the server's
// Retry-After until MaxWait; a command never is (it must not run twice).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/swetui/swetui/event"
	"github.com/swetui/swetui/serve"
)

// Client talks to one server. Safe for concurrent use.
type Client struct {
	URL   string // http://host:port
	Token string // the bearer token, "" for none
	// HTTP is the transport (http.DefaultClient when nil); MaxWait bounds
	// the retries of one call (15 min when 0).
	HTTP    *http.Client
	MaxWait time.Duration
}

// Error is an answer that is not a 2xx, with the server's message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("swetui serve: %d: %s", e.Status, e.Message) }

// Score scores req's patches; one verdict per patch, in order.
func (c *Client) Score(ctx context.Context, req serve.ScoreRequest) (serve.ScoreResponse, error) {
	var resp serve.ScoreResponse
	err := c.do(ctx, http.MethodPost, "/v1/score", req, &resp, true)
	return resp, err
}

// Verify scores req's patches with the server's verifier, none of them
// run (swetui serve --verifier); a server without one answers 404.
func (c *Client) Verify(ctx context.Context, req serve.ScoreRequest) (serve.VerifyResponse, error) {
	var resp serve.VerifyResponse
	err := c.do(ctx, http.MethodPost, "/v1/verify", req, &resp, true)
	return resp, err
}

// Session is an open agent session.
type Session struct {
	c *Client
	serve.OpenResponse
	done bool
}

// Open opens a session on instanceID, a task of the server's dataset.
func (c *Client) Open(ctx context.Context, instanceID string) (*Session, error) {
	s := &Session{c: c}
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", serve.OpenRequest{InstanceID: instanceID}, &s.OpenResponse, true); err != nil {
		return nil, err
	}
	return s, nil
}

// Exec runs a shell command line in the session's work tree (timeout 0:
// the server's serve.exec_timeout_s).
func (s *Session) Exec(ctx context.Context, command string, timeout time.Duration) (serve.ExecResponse, error) {
	var r serve.ExecResponse
	err := s.c.do(ctx, http.MethodPost, "/v1/sessions/"+s.SessionID+"/exec", serve.ExecRequest{Command: command, TimeoutS: timeout.Seconds()}, &r, false)
	return r, err
}

// Submit grades the session's diff in phase ("" for docker) and ends it.
func (s *Session) Submit(ctx context.Context, phase string) (event.Verdict, error) {
	s.done = true
	var r serve.ScoreResponse
	if err := s.c.do(ctx, http.MethodPost, "/v1/sessions/"+s.SessionID+"/submit", serve.SubmitRequest{Phase: phase}, &r, false); err != nil {
		return event.Verdict{}, err
	}
	if len(r.Verdicts) != 1 {
		return event.Verdict{}, fmt.Errorf("swetui serve: submit answered %d verdicts", len(r.Verdicts))
	}
	return r.Verdicts[0], nil
}

// Close ends the session without a verdict; nothing to do once submitted
// or reaped.
func (s *Session) Close(ctx context.Context) error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.c.do(ctx, http.MethodDelete, "/v1/sessions/"+s.SessionID, nil, nil, false)
	if e := new(Error); errors.As(err, &e) && e.Status == http.StatusNotFound {
		return nil
	}
	return err
}

func (c *Client) do(ctx context.Context, method, path string, body, out any, retry bool) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("swetui serve: %w", err)
		}
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	wait := c.MaxWait
	if wait == 0 {
		wait = 15 * time.Minute
	}
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+path, bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("swetui serve: %w", err)
		}
		if data != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("swetui serve: %s %s: %w", method, path, err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("swetui serve: %s %s: %w", method, path, err)
		}
		if resp.StatusCode/100 == 2 {
			if out == nil || len(raw) == 0 {
				return nil
			}
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("swetui serve: %s %s: %w", method, path, err)
			}
			return nil
		}
		var e struct {
			Error       string  `json:"error"`
			RetryAfterS float64 `json:"retry_after_s"`
		}
		json.Unmarshal(raw, &e)
		if !retry || resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return &Error{Status: resp.StatusCode, Message: e.Error}
		}
		delay := time.Duration(e.RetryAfterS * float64(time.Second))
		if delay <= 0 {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			delay = time.Duration(max(secs, 1)) * time.Second
		}
		if time.Now().Add(delay).After(deadline) {
			return &Error{Status: resp.StatusCode, Message: e.Error + fmt.Sprintf(" (still refused after %s of retries)", wait)}
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("swetui serve: %w", ctx.Err())
		}
	}
}
