//go:build integration

package validate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIntegrationHelmInstallUpgradeUninstall installs the chart for real,
// with the helm command a user runs (Helm v4, pinned in this module's
// go.mod), on the test kube-apiserver, beside the tests that only render
// it or install it with --dry-run: the chart's kubeVersion is checked
// against the API server's own version (build-kube.sh stamps it), the
// objects are created, `helm upgrade` with another config changes the
// ConfigMap and the Deployment's Pod template (checksum/config: the Pods
// roll), and `helm uninstall` removes them. No controller runs beside the
// API server: nothing waits for Pods.
func TestIntegrationHelmInstallUpgradeUninstall(t *testing.T) {
	a := connect(t)
	ns := uniqueNamespace("phe-helm-live")
	a.namespace(t, ns)
	dir := t.TempDir()
	token, err := os.ReadFile(os.Getenv("PHE_K8S_ADMIN_TOKEN_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeTestFile(t, dir, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "`+os.Getenv("PHE_K8S_SERVER")+`", certificate-authority: "`+os.Getenv("PHE_K8S_CA")+`"}}]
users: [{name: admin, user: {token: "`+strings.TrimSpace(string(token))+`"}}]
contexts: [{name: test, context: {cluster: test, user: admin, namespace: `+ns+`}}]
current-context: test
`)
	values := func(name, timeout string) string {
		return writeTestFile(t, dir, name, "config:\n  defaults: {timeout: "+timeout+"}\n  kubernetes:\n    - name: this-cluster\n")
	}
	helm := func(args ...string) string {
		t.Helper()
		// go tool runs the helm of this module's go.mod; HELM_* keep its
		// cache, config and data in the test's directory.
		cmd := exec.CommandContext(t.Context(), "go", append([]string{"tool", "helm", "--kubeconfig", kubeconfig, "--namespace", ns}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	ctx := context.Background()
	deployment := chartRelease + "-provider-health-exporter"
	podTemplate := func() (checksum, config string) {
		t.Helper()
		d, err := a.cs.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the release's Deployment: %v", err)
		}
		cms, err := a.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + chartRelease})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			for k, v := range cm.Data {
				if strings.HasSuffix(k, ".yml") || strings.HasSuffix(k, ".yaml") {
					config += v
				}
			}
		}
		return d.Spec.Template.Annotations["checksum/config"], config
	}

	helm("install", chartRelease, chartDir, "--values", values("first.yaml", "10s"))
	sum1, cfg1 := podTemplate()
	if sum1 == "" || !strings.Contains(cfg1, "timeout: 10s") {
		t.Fatalf("after helm install: checksum/config %q, config %q; want a checksum and timeout 10s", sum1, cfg1)
	}
	if out := helm("status", chartRelease); !strings.Contains(out, "STATUS: deployed") {
		t.Errorf("helm status after install: want STATUS: deployed")
	}

	helm("upgrade", chartRelease, chartDir, "--values", values("second.yaml", "7s"))
	sum2, cfg2 := podTemplate()
	if !strings.Contains(cfg2, "timeout: 7s") || strings.Contains(cfg2, "timeout: 10s") {
		t.Errorf("after helm upgrade the ConfigMap holds %q, want timeout 7s", cfg2)
	}
	if sum2 == sum1 || sum2 == "" {
		t.Errorf("helm upgrade with another config left the Pod template's checksum/config at %q: the Pods would not roll", sum2)
	}
	if out := helm("history", chartRelease); !strings.Contains(out, "Upgrade complete") {
		t.Errorf("helm history after upgrade: no \"Upgrade complete\" revision")
	}

	helm("uninstall", chartRelease)
	if _, err := a.cs.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the Deployment: %v, want not found", err)
	}
	if cms, err := a.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + chartRelease}); err != nil || len(cms.Items) != 0 {
		t.Errorf("after helm uninstall: %d ConfigMaps of the release (%v), want none", len(cms.Items), err)
	}
}
