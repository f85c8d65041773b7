package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"sync"
	"time"
)

// sshCommand is the ssh client to run; tests point it at a stand-in.
var sshCommand = "ssh"

// sshDialer returns a dialer that reaches the Docker Engine on an ssh://
// endpoint the way the docker CLI's connhelper does: every connection is one
// `ssh host -- docker system dial-stdio` whose stdin and stdout carry the API.
// Keys and known hosts come from the user's ssh setup; BatchMode keeps ssh
// from prompting on a terminal the console owns.
func sshDialer(endpoint string) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("docker endpoint %q: %w", endpoint, err)
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("docker endpoint %q: want ssh://[user@]host[:port]", endpoint)
	}
	if _, has := u.User.Password(); has {
		return nil, fmt.Errorf("docker endpoint %s: passwords are not supported, use an ssh key", describeEndpoint(endpoint))
	}
	args := []string{"-o", "BatchMode=yes"}
	if u.User != nil && u.User.Username() != "" {
		args = append(args, "-l", u.User.Username())
	}
	if p := u.Port(); p != "" {
		args = append(args, "-p", p)
	}
	args = append(args, "--", u.Hostname(), "docker", "system", "dial-stdio")
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialCommand(ctx, endpoint, sshCommand, args...)
	}, nil
}

// dialCommand starts name with args and returns a connection over its stdin
// and stdout. The command outlives ctx (ctx only bounds the start); Close
// ends it.
func dialCommand(ctx context.Context, endpoint, name string, args ...string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	stderr := &tailBuffer{max: 2048}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dial %s: start %s: %w", endpoint, name, err)
	}
	c := &commandConn{cmd: cmd, stdin: stdin, stdout: stdout, stderr: stderr, endpoint: endpoint}
	go func() { _ = cmd.Wait() }() // reaps the child whenever it ends
	return c, nil
}

// commandConn is a net.Conn over a child process's stdin and stdout.
type commandConn struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	stdout    io.ReadCloser
	stderr    *tailBuffer
	endpoint  string
	closeOnce sync.Once
}

func (c *commandConn) Read(p []byte) (int, error) {
	n, err := c.stdout.Read(p)
	if err == io.EOF && n == 0 {
		if s := c.stderr.String(); s != "" {
			return 0, fmt.Errorf("%s: connection closed: %s", c.endpoint, s)
		}
	}
	return n, err
}

func (c *commandConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

// CloseWrite half-closes, so hijacked attach streams can signal EOF.
func (c *commandConn) CloseWrite() error { return c.stdin.Close() }

func (c *commandConn) Close() error {
	c.closeOnce.Do(func() {
		// Like the CLI's connhelper: the HTTP transport closes idle
		// connections at will, so end the child at once.
		c.stdin.Close()
		c.stdout.Close()
		_ = c.cmd.Process.Kill()
	})
	return nil
}

func (c *commandConn) LocalAddr() net.Addr              { return dummyAddr{} }
func (c *commandConn) RemoteAddr() net.Addr             { return dummyAddr{} }
func (c *commandConn) SetDeadline(time.Time) error      { return nil }
func (c *commandConn) SetReadDeadline(time.Time) error  { return nil }
func (c *commandConn) SetWriteDeadline(time.Time) error { return nil }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "command" }
func (dummyAddr) String() string  { return "command" }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
