package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Bounds of a kubeconfig exec credential plugin (docs/security.md: "What the exporter bounds"): its
// standard output, which holds one ExecCredential, and what of its
// standard error a failure message quotes. The plugin runs under the
// check's deadline and is killed, with its process group, when that ends.
const (
	execOutputLimit = 1 << 20
	execStderrLimit = 64 << 10
	execWaitDelay   = 500 * time.Millisecond
)

// execPlugin runs a kubeconfig's exec credential plugin the way kubectl
// does — KUBERNETES_EXEC_INFO in its environment, an ExecCredential on its
// standard output, reused until its expirationTimestamp — but under the
// check's context, with its output capped: client-go's own runner takes
// no context and reads the output whole.
type execPlugin struct {
	cfg  clientcmdapi.ExecConfig
	info []byte // KUBERNETES_EXEC_INFO

	mu   sync.Mutex // one run at a time; guards cred
	cred *execCredential
}

// execCredential is the part of an ExecCredential the check uses.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Status     *struct {
		ExpirationTimestamp   *time.Time `json:"expirationTimestamp,omitempty"`
		Token                 string     `json:"token,omitempty"`
		ClientCertificateData string     `json:"clientCertificateData,omitempty"`
		ClientKeyData         string     `json:"clientKeyData,omitempty"`
	} `json:"status"`
}

func newExecPlugin(cfg *clientcmdapi.ExecConfig, rc *rest.Config) *execPlugin {
	info := map[string]any{
		"apiVersion": cfg.APIVersion,
		"kind":       "ExecCredential",
		"spec":       map[string]any{"interactive": false},
	}
	if cfg.ProvideClusterInfo {
		info["spec"] = map[string]any{"interactive": false, "cluster": map[string]any{
			"server": rc.Host, "certificate-authority-data": rc.CAData,
			"tls-server-name": rc.ServerName, "insecure-skip-tls-verify": rc.Insecure,
		}}
	}
	b, _ := json.Marshal(info) //nolint:errchkjson // plain maps of strings, bytes and bools
	return &execPlugin{cfg: *cfg, info: b}
}

// credential returns the plugin's credential: the last one while it has
// not expired, else a new one from a run of the plugin under ctx.
func (p *execPlugin) credential(ctx context.Context, logger *slog.Logger) (*execCredential, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cred; c != nil && (c.Status.ExpirationTimestamp == nil || time.Now().Before(*c.Status.ExpirationTimestamp)) {
		return c, nil
	}
	p.cred = nil
	c, err := p.run(ctx, logger)
	if err != nil {
		return nil, err
	}
	p.cred = c
	return c, nil
}

// forget drops the credential: the next check runs the plugin.
func (p *execPlugin) forget() {
	p.mu.Lock()
	p.cred = nil
	p.mu.Unlock()
}

// run runs the plugin once. Its process group is killed when ctx ends or
// when it writes more than execOutputLimit, so that neither a plugin that
// never exits nor its children outlive the check.
func (p *execPlugin) run(ctx context.Context, logger *slog.Logger) (*execCredential, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.cfg.Command, p.cfg.Args...)
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(p.info))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Wait returns this long after the kill even when a grandchild that
	// left the group still holds the output pipes.
	cmd.WaitDelay = execWaitDelay
	stdout := &cappedBuffer{limit: execOutputLimit, overflow: cancel}
	stderr := &cappedBuffer{limit: execStderrLimit}
	cmd.Stdout, cmd.Stderr = stdout, stderr

	logger.Debug("running exec credential plugin", "command", p.cfg.Command)
	err := cmd.Run()
	switch {
	case stdout.over:
		return nil, fmt.Errorf("exec plugin %s: wrote more than %d bytes, the limit of its output; it was killed", p.cfg.Command, execOutputLimit)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("exec plugin %s did not finish before the deadline; it was killed: %w", p.cfg.Command, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("exec plugin %s: %w%s", p.cfg.Command, err, quote(stderr.Bytes()))
	}
	return parseExecCredential(p.cfg.Command, p.cfg.APIVersion, stdout.Bytes())
}

// parseExecCredential reads what a plugin printed: an ExecCredential of the
// API version its kubeconfig asked for, with a token or a whole client
// certificate.
func parseExecCredential(command, apiVersion string, out []byte) (*execCredential, error) {
	var c execCredential
	if err := json.Unmarshal(out, &c); err != nil {
		return nil, fmt.Errorf("exec plugin %s: its output is not an ExecCredential: %w", command, err)
	}
	switch {
	case c.Kind != "ExecCredential" || c.APIVersion != apiVersion:
		return nil, fmt.Errorf("exec plugin %s: got %s %s, want ExecCredential %s", command, c.APIVersion, c.Kind, apiVersion)
	case c.Status == nil || (c.Status.Token == "" && c.Status.ClientCertificateData == ""):
		return nil, fmt.Errorf("exec plugin %s: its ExecCredential has neither a token nor a client certificate", command)
	case (c.Status.ClientCertificateData == "") != (c.Status.ClientKeyData == ""):
		return nil, fmt.Errorf("exec plugin %s: its ExecCredential has a client certificate without its key, or a key without its certificate", command)
	}
	return &c, nil
}

// quote is the end of a plugin's standard error for a message: its last
// line, short, since it may be long and is the plugin's words.
func quote(stderr []byte) string {
	s := strings.TrimSpace(string(stderr))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return ": " + s
}

// cappedBuffer keeps at most limit bytes; past that it calls overflow once
// and fails the write, which ends the copy from the plugin. The buffer is
// a field, not embedded: an embedded bytes.Buffer's ReadFrom would let
// io.Copy go around Write and its cap.
type cappedBuffer struct {
	buf      bytes.Buffer
	limit    int
	over     bool
	overflow func()
}

var errOutputLimit = errors.New("output limit reached")

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if !b.over && b.buf.Len()+len(p) <= b.limit {
		return b.buf.Write(p)
	}
	if b.overflow == nil {
		// Standard error: keep what fits and drop the rest quietly.
		b.over = true
		b.buf.Write(p[:min(max(b.limit-b.buf.Len(), 0), len(p))])
		return len(p), nil
	}
	if !b.over {
		b.over = true
		b.overflow()
	}
	return 0, errOutputLimit
}

func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }
