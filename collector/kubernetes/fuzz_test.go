package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzKubeconfig: a kubeconfig of any content is refused with an error or
// turns into a client configuration, never a panic, and nothing is run or
// requested (an exec plugin only runs when a request needs credentials).
func FuzzKubeconfig(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
		"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/false\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
		"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: bm90IGEgY2VydA==\ncurrent-context: missing\n",
		"{}", "", "[]", "current-context: 1\n", "clusters: [{name: c, cluster: {server: '%zz'}}]\ncontexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n",
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "x")
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	f.Fuzz(func(t *testing.T, b []byte, context string) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckFiles(&Entry{Name: "k", Kubeconfig: path, Context: context}); err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}

// FuzzExecCredential: whatever an exec plugin prints is refused with an
// error naming the plugin or is a credential the check can use, never a
// panic.
func FuzzExecCredential(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}`,
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"c","clientKeyData":"k"}}`,
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"c"}}`,
		`{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}`,
		`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"tomorrow"}}`,
		`{"kind":"ExecCredential","status":null}`, `null`, `[]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		c, err := parseExecCredential("plugin", "client.authentication.k8s.io/v1", out)
		if err != nil {
			if !strings.Contains(err.Error(), "exec plugin plugin") {
				t.Errorf("error does not name the plugin: %v", err)
			}
			return
		}
		if c.Status == nil || (c.Status.Token == "" && (c.Status.ClientCertificateData == "" || c.Status.ClientKeyData == "")) {
			t.Errorf("accepted an unusable credential from %q", out)
		}
	})
}
