package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/cnibench/cnibench/internal/cluster"
)

// execOptions is what Exec asks the pods/exec subresource for: argv in container "main", as
// separate arguments (no shell), stdout and stderr, stdin only when asked for, no TTY.
func execOptions(argv []string, stdin bool) *corev1.PodExecOptions {
	return &corev1.PodExecOptions{
		Container: ContainerName,
		Command:   append([]string(nil), argv...),
		Stdin:     stdin,
		Stdout:    true,
		Stderr:    true,
	}
}

// execURL is the pods/exec request URL for opts on the core/v1 REST client.
func execURL(core rest.Interface, ns, pod string, opts *corev1.PodExecOptions) *url.URL {
	return core.Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
}

// newExecutor streams over WebSocket and falls back to SPDY when the server (or a proxy in
// between) cannot upgrade to WebSocket, as kubectl exec does.
func newExecutor(rc *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(rc, "POST", u)
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(rc, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// exitCode extracts a command's exit status from a stream error.
func exitCode(err error) (int, bool) {
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), true
	}
	return 0, false
}

// Exec implements cluster.Cluster through the pods/exec subresource. A non-zero exit is
// reported in ExitCode; cancelling ctx ends the stream (the command itself may outlive it in
// the container, as with kubectl exec).
// A command run in a pod an accounting window reads is credited to it with the CPU time it
// used (execAccounted).
func (c *Cluster) Exec(ctx context.Context, pod string, argv []string) (cluster.ExecResult, error) {
	if ws := c.windowsOn(pod); len(ws) > 0 && len(argv) > 0 {
		return c.execAccounted(ctx, pod, argv, ws)
	}
	return c.execPlain(ctx, pod, argv)
}

// execPlain is Exec without accounting: the backend's own commands (reading /proc, starting
// and stopping servers, probes).
func (c *Cluster) execPlain(ctx context.Context, pod string, argv []string) (cluster.ExecResult, error) {
	return c.execInput(ctx, pod, nil, argv)
}

// execInput is Exec with stdin (nil: none) fed to the command.
func (c *Cluster) execInput(ctx context.Context, pod string, stdin []byte, argv []string) (cluster.ExecResult, error) {
	if len(argv) == 0 {
		return cluster.ExecResult{}, errors.New("empty command")
	}
	if c.rc == nil || c.core == nil {
		return cluster.ExecResult{}, errors.New("exec needs a REST config (the cluster was created without one)")
	}
	ex, err := newExecutor(c.rc, execURL(c.core, c.ns, c.podName(pod), execOptions(argv, stdin != nil)))
	if err != nil {
		return cluster.ExecResult{}, fmt.Errorf("exec in pod %s: %w", pod, err)
	}
	// On cancellation StreamWithContext returns while its copiers may still write.
	var stdout, stderr cluster.LockedBuffer
	opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
	if stdin != nil {
		opts.Stdin = bytes.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	res := cluster.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if code, ok := exitCode(err); ok {
		res.ExitCode = code
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("exec %s in pod %s: %w", argv[0], pod, err)
	}
	return res, nil
}
