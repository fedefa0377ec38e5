//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The kubernetes entry with pod_template (docs/configuration.md:
// "Placement: pod_template"): a real kube-apiserver (testdata/kubernetes)
// whose namespace admNamespace enforces Pod Security "restricted", and a
// template whose proxy runs as root, so that the dry run is AdmissionDenied
// by the real PodSecurity admission.
const (
	admName      = "e2e-admission"
	admNamespace = "e2e-proxies"
)

// The kubernetes entry with schedule (docs/configuration.md: "Scheduling:
// schedule") on the same kube-apiserver: one synthetic Node, cordoned, so
// that admission takes the proxy Pod and no node would run it.
const (
	schedName      = "e2e-unschedulable"
	schedNamespace = "e2e-sched"
	schedNode      = "e2e-synthetic-node"
)

// schedPod is the operator's proxy Pod of the schedule entry: admitted
// (no Pod Security level in its namespace), asking for one CPU.
const schedPod = `apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator}
spec:
  automountServiceAccountToken: false
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1.4.2
      resources: {requests: {cpu: "1"}}
`

// The kubernetes entry with capacity_domain (docs/metrics.md: "Capacity
// per failure domain") on the same kube-apiserver and ServiceAccount:
// three synthetic Nodes of 4 CPUs, one per zone, tainted for it alone, and
// eight running proxies bound to them, 6, 1 and 1 (as after a zone came
// back). The zone spread (maxSkew 3, DoNotSchedule) leaves plenty of room,
// but losing e2e-zone-a leaves it a domain at zero (its Node tainted
// unreachable, still counted under the default nodeTaintsPolicy Ignore):
// the other zones take 3 each, 4 of its 6 proxies, and 2 find no place, so
// ProviderCapacityNotDomainResilient fires for e2e-zone-a alone.
const (
	zoneName      = "e2e-zones"
	zoneNamespace = "e2e-zones"
	zoneTaint     = "provider-health-e2e/zoned"
)

// zonePod is the zone entry's proxy Pod: 100m, the zones' Nodes only.
const zonePod = `apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator, app.kubernetes.io/name: egress-proxy-zoned}
spec:
  automountServiceAccountToken: false
  nodeSelector: {provider-health-e2e: zoned}
  tolerations: [{key: ` + zoneTaint + `, operator: Exists, effect: NoSchedule}]
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1.4.2
      resources: {requests: {cpu: 100m, memory: 64Mi}}
  topologySpreadConstraints:
    - maxSkew: 3
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app.kubernetes.io/name: egress-proxy-zoned}}
`

// admRootPod is the operator's proxy Pod, running as root.
const admRootPod = `apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator}
spec:
  automountServiceAccountToken: false
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1.4.2
`

// admission is the real cluster the pod_template entry checks.
type admission struct {
	server, caPEM, adminToken string
	http                      *http.Client
	// kubeconfig and template are the entry's files; token is the
	// exporter's credential in kubeconfig (a secret).
	kubeconfig, template, token string
	// schedKubeconfig and schedTemplate are the schedule entry's files.
	schedKubeconfig, schedTemplate string
	// zoneTemplate is the zone entry's Pod (its kubeconfig is the
	// schedule entry's).
	zoneTemplate string
}

// startAdmission starts etcd and kube-apiserver with testdata/kubernetes
// (the apiserver built once per machine by build-apiserver.sh), stopped by
// their PIDs when the test ends, and prepares what the entry needs: the
// restricted namespace with its default ServiceAccount, and a
// ServiceAccount that may list pods cluster-wide and create pods in the
// namespace (the base's ClusterRole and components/placement's Role).
func startAdmission(t *testing.T, root, dir string) *admission {
	t.Helper()
	bin := strings.TrimSpace(run(t, root, nil, filepath.Join(root, "testdata", "kubernetes", "build-apiserver.sh")))
	state, err := os.MkdirTemp("", "phe-e2e-k8s.")
	must(t, err)
	ctl := filepath.Join(root, "testdata", "kubernetes", "ctl.sh")
	t.Cleanup(func() {
		if out, err := exec.Command(ctl, "stop", state).CombinedOutput(); err != nil {
			t.Errorf("ctl.sh stop %s: %v\n%s", state, err, out)
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(state, "apiserver.log")); err == nil {
				t.Logf("--- apiserver.log (%s) ---\n%s", state, lastLines(string(b), 40))
			}
		}
		if os.Getenv(envKeep) != "" {
			t.Logf("kept the kube-apiserver state directory %s", state)
			return
		}
		_ = os.RemoveAll(state)
	})
	run(t, root, nil, ctl, "start", state, bin)
	env := map[string]string{}
	b, err := os.ReadFile(filepath.Join(state, "env"))
	must(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	ca, err := os.ReadFile(env["PHE_K8S_CA"])
	must(t, err)
	tok, err := os.ReadFile(env["PHE_K8S_ADMIN_TOKEN_FILE"])
	must(t, err)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s", env["PHE_K8S_CA"])
	}
	a := &admission{server: env["PHE_K8S_SERVER"], caPEM: string(ca), adminToken: strings.TrimSpace(string(tok)),
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	t.Cleanup(a.http.CloseIdleConnections)

	rbac := "/apis/rbac.authorization.k8s.io/v1"
	a.create(t, "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": admNamespace,
		"labels": map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})
	for _, sa := range []string{"default", "exporter"} {
		a.create(t, "/api/v1/namespaces/"+admNamespace+"/serviceaccounts", map[string]any{"metadata": map[string]any{"name": sa}})
	}
	subjects := []map[string]string{{"kind": "ServiceAccount", "name": "exporter", "namespace": admNamespace}}
	a.create(t, rbac+"/clusterroles", map[string]any{"metadata": map[string]any{"name": "e2e-list-pods"},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"list"}}}})
	a.create(t, rbac+"/clusterrolebindings", map[string]any{"metadata": map[string]any{"name": "e2e-list-pods"},
		"roleRef": map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-list-pods"}, "subjects": subjects})
	a.create(t, rbac+"/namespaces/"+admNamespace+"/roles", map[string]any{"metadata": map[string]any{"name": "e2e-placement"},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"create"}}}})
	a.create(t, rbac+"/namespaces/"+admNamespace+"/rolebindings", map[string]any{"metadata": map[string]any{"name": "e2e-placement"},
		"roleRef": map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-placement"}, "subjects": subjects})
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	must(t, json.Unmarshal(a.create(t, "/api/v1/namespaces/"+admNamespace+"/serviceaccounts/exporter/token",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}), &tr))
	if tr.Status.Token == "" {
		t.Fatal("TokenRequest gave no token")
	}
	a.token = tr.Status.Token
	a.kubeconfig = writeFile(t, dir, "kubeconfig-admission", fmt.Sprintf(kubeconfigTmpl, a.server, base64.StdEncoding.EncodeToString(ca), a.token))
	a.template = writeFile(t, dir, "proxy-pod.yaml", admRootPod)
	a.startSchedule(t, dir, ca)
	return a
}

// startSchedule prepares the schedule entry: its namespace with its
// default ServiceAccount, a ServiceAccount that may create Pods there and
// list and watch Nodes and Pods cluster-wide (components/placement's and
// components/schedule's rules), and one synthetic Node, cordoned, with its
// status written as a kubelet would and the not-ready taint that admission
// puts on a new Node lifted, since no node controller runs.
func (a *admission) startSchedule(t *testing.T, dir string, ca []byte) {
	t.Helper()
	rbac := "/apis/rbac.authorization.k8s.io/v1"
	a.create(t, "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": schedNamespace}})
	for _, sa := range []string{"default", "scheduler"} {
		a.create(t, "/api/v1/namespaces/"+schedNamespace+"/serviceaccounts", map[string]any{"metadata": map[string]any{"name": sa}})
	}
	subjects := []map[string]string{{"kind": "ServiceAccount", "name": "scheduler", "namespace": schedNamespace}}
	a.create(t, rbac+"/clusterroles", map[string]any{"metadata": map[string]any{"name": "e2e-schedule"},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"nodes", "pods"}, "verbs": []string{"list", "watch"}}}})
	a.create(t, rbac+"/clusterrolebindings", map[string]any{"metadata": map[string]any{"name": "e2e-schedule"},
		"roleRef": map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-schedule"}, "subjects": subjects})
	a.create(t, rbac+"/namespaces/"+schedNamespace+"/roles", map[string]any{"metadata": map[string]any{"name": "e2e-schedule-placement"},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"create"}},
			{"apiGroups": []string{""}, "resources": []string{"resourcequotas"}, "verbs": []string{"list"}}}})
	a.create(t, rbac+"/namespaces/"+schedNamespace+"/rolebindings", map[string]any{"metadata": map[string]any{"name": "e2e-schedule-placement"},
		"roleRef": map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-schedule-placement"}, "subjects": subjects})

	a.create(t, "/api/v1/nodes", map[string]any{"metadata": map[string]any{"name": schedNode, "labels": map[string]string{"provider-health-e2e": "synthetic"}}})
	alloc := map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}
	a.patch(t, "/api/v1/nodes/"+schedNode+"/status", map[string]any{"status": map[string]any{"capacity": alloc, "allocatable": alloc,
		"conditions": []map[string]string{{"type": "Ready", "status": "True", "reason": "SyntheticNode"}}}})
	a.patch(t, "/api/v1/nodes/"+schedNode, map[string]any{"spec": map[string]any{"taints": nil, "unschedulable": true}})

	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	must(t, json.Unmarshal(a.create(t, "/api/v1/namespaces/"+schedNamespace+"/serviceaccounts/scheduler/token",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}), &tr))
	if tr.Status.Token == "" {
		t.Fatal("TokenRequest gave no token")
	}
	a.schedKubeconfig = writeFile(t, dir, "kubeconfig-schedule", fmt.Sprintf(kubeconfigTmpl, a.server, base64.StdEncoding.EncodeToString(ca), tr.Status.Token))
	a.schedTemplate = writeFile(t, dir, "proxy-pod-schedule.yaml", schedPod)
	a.startZones(t, dir)
}

// startZones prepares the zone entry: its namespace, where the schedule
// entry's ServiceAccount may create Pods, the three zones' Nodes and the
// eight running proxies, bound by their nodeName as the scheduler would.
func (a *admission) startZones(t *testing.T, dir string) {
	t.Helper()
	rbac := "/apis/rbac.authorization.k8s.io/v1"
	a.create(t, "/api/v1/namespaces", map[string]any{"metadata": map[string]any{"name": zoneNamespace}})
	a.create(t, "/api/v1/namespaces/"+zoneNamespace+"/serviceaccounts", map[string]any{"metadata": map[string]any{"name": "default"}})
	subjects := []map[string]string{{"kind": "ServiceAccount", "name": "scheduler", "namespace": schedNamespace}}
	a.create(t, rbac+"/namespaces/"+zoneNamespace+"/roles", map[string]any{"metadata": map[string]any{"name": "e2e-schedule-placement"},
		"rules": []map[string]any{{"apiGroups": []string{""}, "resources": []string{"pods"}, "verbs": []string{"create"}},
			{"apiGroups": []string{""}, "resources": []string{"resourcequotas"}, "verbs": []string{"list"}}}})
	a.create(t, rbac+"/namespaces/"+zoneNamespace+"/rolebindings", map[string]any{"metadata": map[string]any{"name": "e2e-schedule-placement"},
		"roleRef": map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-schedule-placement"}, "subjects": subjects})
	alloc := map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"}
	for _, zone := range []string{"a", "b", "c"} {
		node := "e2e-zone-node-" + zone
		a.create(t, "/api/v1/nodes", map[string]any{"metadata": map[string]any{"name": node,
			"labels": map[string]string{"provider-health-e2e": "zoned", "topology.kubernetes.io/zone": "e2e-zone-" + zone}}})
		a.patch(t, "/api/v1/nodes/"+node+"/status", map[string]any{"status": map[string]any{"capacity": alloc, "allocatable": alloc,
			"conditions": []map[string]string{{"type": "Ready", "status": "True", "reason": "SyntheticNode"}}}})
		a.patch(t, "/api/v1/nodes/"+node, map[string]any{"spec": map[string]any{"taints": []map[string]string{{"key": zoneTaint, "effect": "NoSchedule"}}}})
	}
	for i, zone := range []string{"a", "a", "a", "a", "a", "a", "b", "c"} {
		a.create(t, "/api/v1/namespaces/"+zoneNamespace+"/pods", map[string]any{
			"metadata": map[string]any{"name": fmt.Sprintf("egress-proxy-%d", i),
				"labels": map[string]string{"app.kubernetes.io/managed-by": "egress-proxies-operator", "app.kubernetes.io/name": "egress-proxy-zoned"}},
			"spec": map[string]any{"nodeName": "e2e-zone-node-" + zone, "automountServiceAccountToken": false,
				"tolerations": []map[string]string{{"key": zoneTaint, "operator": "Exists", "effect": "NoSchedule"}},
				"containers": []map[string]any{{"name": "proxy", "image": "registry.example/egress-proxy:1.4.2",
					"resources": map[string]any{"requests": map[string]string{"cpu": "100m", "memory": "64Mi"}}}}}})
	}
	a.zoneTemplate = writeFile(t, dir, "proxy-pod-zoned.yaml", zonePod)
}

// patch sends a JSON merge patch of path as the admin; anything but 200
// fails the test.
func (a *admission) patch(t *testing.T, path string, obj any) {
	t.Helper()
	b, err := json.Marshal(obj)
	must(t, err)
	req, err := http.NewRequest(http.MethodPatch, a.server+path, bytes.NewReader(b))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+a.adminToken)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatalf("PATCH %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH %s: %d %s", path, resp.StatusCode, body)
	}
}

// create POSTs obj to path as the admin and returns the answer; anything
// but 201 fails the test.
func (a *admission) create(t *testing.T, path string, obj any) []byte {
	t.Helper()
	code, body := a.do(t, http.MethodPost, path, obj)
	if code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, code, body)
	}
	return body
}

func (a *admission) do(t *testing.T, method, path string, obj any) (int, []byte) {
	t.Helper()
	var body io.Reader
	if obj != nil {
		b, err := json.Marshal(obj)
		must(t, err)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.server+path, body)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+a.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp.StatusCode, b
}

// admissionConfig is the template data of the pod_template entry.
func (a *admission) admissionConfig() map[string]any {
	return map[string]any{"Admission": true, "AdmName": admName, "AdmKubeconfig": a.kubeconfig, "AdmNamespace": admNamespace, "AdmTemplate": a.template,
		"SchedName": schedName, "SchedKubeconfig": a.schedKubeconfig, "SchedNamespace": schedNamespace, "SchedTemplate": a.schedTemplate,
		"ZoneName": zoneName, "ZoneNamespace": zoneNamespace, "ZoneTemplate": a.zoneTemplate}
}

// admissionAlerts are the alerts the entry raises: not ready, its only
// target, and a reason waiting does not fix.
func admissionAlerts(exporterAddr string) []alertMatch {
	return []alertMatch{{name: "ProviderNotReady", labels: map[string]string{
		"job": job, "instance": exporterAddr, "provider": "kubernetes", "name": admName, "target": "apiserver", "severity": "warning",
	}, description: "reason: AdmissionDenied."}, {name: "ProviderUnavailable", labels: map[string]string{
		"job": job, "provider": "kubernetes", "name": admName, "severity": "critical",
	}, description: "reasons: AdmissionDenied."}, {name: "ProviderActionRequired", labels: map[string]string{
		"job": job, "instance": exporterAddr, "provider": "kubernetes", "name": admName, "target": "apiserver", "reason": "AdmissionDenied", "severity": "critical",
	}, description: "has reported AdmissionDenied"}, {name: "ProviderNotReady", labels: map[string]string{
		"job": job, "instance": exporterAddr, "provider": "kubernetes", "name": schedName, "target": "apiserver", "severity": "warning",
	}, description: "reason: Unschedulable."}, {name: "ProviderUnavailable", labels: map[string]string{
		"job": job, "provider": "kubernetes", "name": schedName, "severity": "critical",
	}, description: "reasons: Unschedulable."}, {name: "ProviderCapacityNotDomainResilient", labels: map[string]string{
		"job": job, "instance": exporterAddr, "provider": "kubernetes", "name": zoneName, "target": "apiserver", "domain": "e2e-zone-a", "severity": "warning",
	}, description: "if domain e2e-zone-a were lost, 2 of the proxies it runs would find no place"}}
}

// checkUnschedulable asserts that the schedule entry is Unschedulable (up
// 1, ready 0) everywhere the exporter shows it: admission took the proxy
// Pod, and the only Node, cordoned, would not run it; the message counts
// it as kube-scheduler does, and the last fit is under details.
func checkUnschedulable(t *testing.T, prom *promAPI, exporterURL string) {
	t.Helper()
	// The zone entry's three Nodes are tainted for it alone.
	msg := regexp.MustCompile(`^0/4 nodes are available: 1 node\(s\) were unschedulable, 3 node\(s\) had untolerated taint \{` + zoneTaint + `: \}$`)
	details := checkHeadroom(t, prom, exporterURL, "kubernetes", schedName, "apiserver", "Unschedulable", msg)
	if !strings.HasPrefix(details["schedule"], "Unschedulable: 0/4 nodes are available") || details["scheduleTime"] == "" {
		t.Errorf("/api/v1/status details %v: want the last fit under schedule and scheduleTime", details)
	}
}

// checkAdmissionDenied asserts that the pod_template entry is
// AdmissionDenied (up 1, ready 0) from the real PodSecurity admission
// everywhere the exporter shows it, with the template, namespace and dry
// run under details; that /probe?debug=true logs the request line and the
// answer's status; and that the dry run left no Pod behind.
func checkAdmissionDenied(t *testing.T, prom *promAPI, exporterURL string, a *admission) {
	t.Helper()
	msg := regexp.MustCompile(`^dry-run create of pod_template in namespace ` + admNamespace + ` refused by PodSecurity: pods "egress-proxy-\w*" is forbidden: violates PodSecurity "restricted:latest": .*runAsNonRoot != true`)
	details := checkHeadroom(t, prom, exporterURL, "kubernetes", admName, "apiserver", "AdmissionDenied", msg)
	if details["podTemplate"] != a.template || details["namespace"] != admNamespace ||
		!strings.HasPrefix(details["dryRun"], "AdmissionDenied: dry-run create of pod_template") || details["dryRunTime"] == "" {
		t.Errorf("/api/v1/status details %v: want podTemplate %s, namespace %s and the last dry run", details, a.template, admNamespace)
	}
	debug := get(t, exporterURL+"/probe?name="+admName+"&debug=true")
	for _, want := range []string{"POST /api/v1/namespaces/" + admNamespace + "/pods?dryRun=All", "status=403"} {
		if !strings.Contains(debug, want) {
			t.Errorf("/probe?name=%s&debug=true lacks %q:\n%s", admName, want, debug)
		}
	}
	code, body := a.do(t, http.MethodGet, "/api/v1/namespaces/"+admNamespace+"/pods", nil)
	var pods struct {
		Items []any `json:"items"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &pods) != nil || len(pods.Items) != 0 {
		t.Errorf("pods in %s after the dry runs: %d %s, want none", admNamespace, code, body)
	}
}
