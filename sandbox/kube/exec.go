package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/swetui/swetui/sandbox"
)

// copyIn writes the evaluation's files into the Pod: one tar stream per
// writable folder (the whole root when it is writable), unpacked by tar in
// the Pod.
func (b *Backend) copyIn(ctx context.Context, id string, spec sandbox.Spec) error {
	files := sandbox.SandboxFiles(spec)
	roots := []string{"/"}
	if !b.cfg.Limits.WritableRoot && !spec.WritableRoot {
		roots = sandbox.WritableDirs(spec)
	}
	for _, root := range roots {
		archive, err := sandbox.TarFiles(files, root)
		if err != nil {
			return fmt.Errorf("evaluation %s: %w: %v", spec.ID, sandbox.ErrBadSpec, err)
		}
		if archive == nil {
			continue
		}
		var out bytes.Buffer
		cctx, cancel := context.WithTimeout(ctx, apiTimeout)
		status, err := b.exec(cctx, id, []string{"tar", "-x", "-m", "-o", "-f", "-", "-C", root}, bytes.NewReader(archive), &out)
		cancel()
		if err != nil {
			return fmt.Errorf("copy files into pod %s: %w", id, err)
		}
		if status != 0 {
			return fmt.Errorf("copy files into pod %s: tar exited %d: %s", id, status, strings.TrimSpace(out.String()))
		}
	}
	if len(files) > 0 {
		return fmt.Errorf("evaluation %s: %w: %d files outside the writable folders %v of a read-only root", spec.ID, sandbox.ErrBadSpec, len(files), roots)
	}
	return nil
}

// Execute drives the evaluation in the running Pod.
func (b *Backend) Execute(ctx context.Context, id string, spec sandbox.Spec, onLog func([]byte), res *sandbox.Result) {
	b.drv.Drive(ctx, spec, podProcs{b: b, id: id}, onLog, res)
	b.mu.Lock()
	delete(b.nodes, id)
	b.mu.Unlock()
}

// podProcs are one Pod's processes, as the Driver runs them.
type podProcs struct {
	b  *Backend
	id string
}

// Exec runs cmd in the evaluation container under the file-size limit
// (RLIMIT_FSIZE: Kubernetes has no ulimit setting). A user other than the
// Pod's cannot be chosen per process: podFor runs the container as it.
func (p podProcs) Exec(ctx context.Context, cmd []string, _ string, out io.Writer) (int, error) {
	return p.b.exec(ctx, p.id, p.limited(cmd), nil, out)
}

// limited is cmd under the file-size limit.
func (p podProcs) limited(cmd []string) []string {
	if mb := p.b.cfg.Limits.DiskMB; mb > 0 {
		return append([]string{"bash", "-c", fmt.Sprintf(`ulimit -f %d && exec "$@"`, mb<<10), "swetui"}, cmd...)
	}
	return cmd
}

// Kill deletes the Pod at once: its processes end, and with them the
// exec streams.
func (p podProcs) Kill(ctx context.Context) error {
	if err := p.b.Remove(ctx, p.id); err != nil {
		return fmt.Errorf("kill pod %s: %w", p.id, err)
	}
	return nil
}

// exec runs cmd in Pod id's evaluation container through the API server
// (WebSocket, else SPDY), stdout and stderr both to out, and returns the
// exit status the kubelet reported.
func (b *Backend) exec(ctx context.Context, id string, cmd []string, stdin io.Reader, out io.Writer) (int, error) {
	w := &syncWriter{w: out}
	return b.execStreams(ctx, id, cmd, stdin, w, w)
}

// execStreams is exec with stdout and stderr apart.
func (b *Backend) execStreams(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	req := b.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(b.namespace).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: evalContainer, Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, "GET", req.URL().String())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, "POST", req.URL())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.Exited():
		return exit.ExitStatus(), nil
	default:
		return -1, fmt.Errorf("exec %s in pod %s on %s: %w", cmd[0], id, b.endpoint, err)
	}
}

// syncWriter serialises the two streams' writes into one output.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
