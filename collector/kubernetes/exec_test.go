package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// plugin writes an exec credential plugin script into dir and returns a
// kubeconfig mutation that uses it instead of the token. The command is
// /bin/sh with the script as its argument, not the script itself: these
// tests run in parallel, and a script exec'd while another test's fork
// still holds it open for writing fails with ETXTBSY ("text file busy").
func plugin(t *testing.T, script string) (func(*clientcmdapi.Config), string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "plugin.sh")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(kc *clientcmdapi.Config) {
		kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			Command: "/bin/sh", Args: []string{path}, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			Env: []clientcmdapi.ExecEnvVar{{Name: "PLUGIN_DIR", Value: dir}},
		}}
	}, dir
}

func tokenServer(t *testing.T) *apiServer {
	t.Helper()
	return newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer plugin-token" {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"), nil)
			return
		}
		writePodList(w)
	})
}

// TestExecPluginCredentialIsReusedUntilExpiry: a plugin's token with an
// expiry is used for every check until then, as kubectl does; the plugin
// sees KUBERNETES_EXEC_INFO and its env.
func TestExecPluginCredentialIsReusedUntilExpiry(t *testing.T) {
	t.Parallel()
	srv := tokenServer(t)
	expiry := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	mutate, dir := plugin(t, `echo run >> "$PLUGIN_DIR/runs"
case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) echo "no exec info" >&2; exit 1;; esac
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"plugin-token","expirationTimestamp":"`+expiry+`"}}'
`)
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), mutate))
	for i := range 3 {
		if v := check(c); v.Reason != provider.ReasonReady {
			t.Fatalf("check %d: %s (%s), want Ready", i, v.Reason, v.Message)
		}
	}
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("plugin ran %d times over 3 checks, want 1", n)
	}
}

// TestExecPluginThatNeverExits: the plugin and its children are killed
// when the check's deadline comes, and the check says so.
func TestExecPluginThatNeverExits(t *testing.T) {
	t.Parallel()
	srv := tokenServer(t)
	mutate, dir := plugin(t, `sleep 1000 &
echo $! > "$PLUGIN_DIR/child"
echo $$ > "$PLUGIN_DIR/self"
wait
`)
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), mutate))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
	if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "did not finish before the deadline") {
		t.Errorf("verdict %s (%s), want CredentialsUnavailable saying the plugin did not finish (the engine makes it Timeout)", v.Reason, v.Message)
	}
	for _, name := range []string{"self", "child"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the plugin did not start: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests without a credential", n)
	}
}

// waitGone waits until process pid is gone or a zombie. The kill is sent
// before Check returns; reaping an orphan is the system's, so this waits
// instead of asserting at once.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
			return
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecPluginOutputIsCapped: a plugin that prints 100 MB is killed at
// the cap, and the check names the limit.
func TestExecPluginOutputIsCapped(t *testing.T) {
	t.Parallel()
	srv := tokenServer(t)
	mutate, _ := plugin(t, `head -c 100000000 /dev/zero`)
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), mutate))
	v := check(c)
	if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, "the limit of its output") {
		t.Errorf("verdict %s (%s), want CredentialsUnavailable naming the output limit", v.Reason, v.Message)
	}
}

// TestExecPluginFailures: a plugin that fails or answers nonsense gives
// CredentialsUnavailable with a message that says why, and runs again at
// the next check.
func TestExecPluginFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, script, want string }{
		{"exit 1", "echo 'token expired, run login' >&2; exit 1", "token expired, run login"},
		{"not JSON", "echo hello", "not an ExecCredential"},
		{"wrong version", `echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}'`, "want ExecCredential client.authentication.k8s.io/v1"},
		{"no token", `echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'`, "neither a token nor a client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := tokenServer(t)
			mutate, _ := plugin(t, tc.script)
			c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), mutate))
			v := check(c)
			if v.Reason != provider.ReasonCredentialsUnavailable || !strings.Contains(v.Message, tc.want) {
				t.Errorf("verdict %s (%s), want CredentialsUnavailable containing %q", v.Reason, v.Message, tc.want)
			}
		})
	}
}

// TestExecCredentialWithoutExpiryIsRenewedAfter401: a credential without
// an expiry is reused until the server refuses it.
func TestExecCredentialWithoutExpiryIsRenewedAfter401(t *testing.T) {
	t.Parallel()
	srv := tokenServer(t)
	mutate, dir := plugin(t, `echo run >> "$PLUGIN_DIR/runs"
tok=$(cat "$PLUGIN_DIR/token" 2>/dev/null || echo stale-token)
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"'$tok'"}}'
`)
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), mutate))
	if v := check(c); v.Reason != provider.ReasonUnauthorized {
		t.Fatalf("stale token: %s (%s), want Unauthorized", v.Reason, v.Message)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("plugin-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Fatalf("after the refusal: %s (%s), want Ready with a new token", v.Reason, v.Message)
	}
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Fatalf("third check: %s (%s), want Ready", v.Reason, v.Message)
	}
	runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
	if n := strings.Count(string(runs), "run"); n != 2 {
		t.Errorf("plugin ran %d times, want 2 (once, then again after the 401)", n)
	}
}
