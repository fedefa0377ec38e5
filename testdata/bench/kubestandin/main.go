// Command kubestandin is a stand-in kube-apiserver for
// testdata/bench/schedule-rows.sh: just enough of the API for the
// exporter's Kubernetes check with schedule (the list call, the dry run,
// the quotas, and the lists and watches of Nodes, Pods and Namespaces),
// serving issue 52's cluster shapes at sizes no test fixture holds in
// memory. Every object is written when it is sent, from its index, so the
// stand-in stays small however large the cluster it serves; it runs
// outside the exporter's memory cgroup all the same. Plain HTTP on
// loopback only.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// cluster is the shape served; see the flags in main.
type cluster struct {
	nodes, zones               int
	nodeCPU, nodeMem, nodePods string
	boundPods                  int // each with one required anti-affinity term per node
	pendingPods, pendingLabels int
	overBound                  int // bound Pods (on the first node) with more labels than the exporter keeps
	overBoundLabels            int
	namespaces, nsBytes        int
	churn                      time.Duration
	spareNode                  bool // one more Node, without a zone, holding the bound Pods
	ignoreFieldSelector        bool

	rv atomic.Int64 // the last resourceVersion handed out

	// bump is closed, and replaced, by each POST /churn: every Pod watch
	// then sends one MODIFIED event.
	mu   sync.Mutex
	bump chan struct{}
}

// bumped is the channel the next POST /churn closes.
func (c *cluster) bumped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bump
}

func main() {
	c := &cluster{}
	addrFile := flag.String("addr-file", "", "write the address listened on to this file")
	flag.IntVar(&c.nodes, "nodes", 1000, "Nodes")
	flag.IntVar(&c.zones, "zones", 3, "zones the Nodes are spread over (topology.kubernetes.io/zone)")
	flag.StringVar(&c.nodeCPU, "node-cpu", "8", "each Node's allocatable cpu")
	flag.StringVar(&c.nodeMem, "node-memory", "32Gi", "each Node's allocatable memory")
	flag.StringVar(&c.nodePods, "node-pods", "110", "each Node's allocatable pods")
	flag.IntVar(&c.boundPods, "bound-pods", 0, "bound Pods, 100m/128Mi each, with one required anti-affinity term per node")
	flag.IntVar(&c.pendingPods, "pending-pods", 0, "Pending Pods (not bound to a node)")
	flag.IntVar(&c.pendingLabels, "pending-labels", 16000, "labels of each Pending Pod")
	flag.IntVar(&c.overBound, "over-bound-pods", 0, "bound Pods on the first Node with -over-bound-labels labels")
	flag.IntVar(&c.overBoundLabels, "over-bound-labels", 200, "labels of each over-bound Pod")
	flag.IntVar(&c.namespaces, "namespaces", 0, "extra Namespaces beside apps, proxies and tenant")
	flag.IntVar(&c.nsBytes, "namespace-bytes", 20<<10, "bytes of labels and annotations of each extra Namespace")
	flag.BoolVar(&c.spareNode, "spare-node", false, "one more Node, spare-node, without a zone label, that the bound Pods are bound to: a zone spread leaves it out, and its Pods' events change the cache's state without changing the count")
	flag.DurationVar(&c.churn, "churn", 0, "send a MODIFIED event of one bound Pod this often on every Pod watch (0: none)")
	flag.BoolVar(&c.ignoreFieldSelector, "ignore-field-selector", false, "send Pending Pods to the bound Pods' watch too, as a server that ignores spec.nodeName!= would")
	flag.Parse()
	c.rv.Store(1000)
	c.bump = make(chan struct{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile+".tmp", []byte(ln.Addr().String()), 0o600); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			log.Fatal(err)
		}
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

func (c *cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := strings.TrimSuffix(r.URL.Path, "/")
	log.Printf("%s %s", r.Method, r.URL.RequestURI())
	switch {
	case path == "/version":
		writeJSON(w, http.StatusOK, map[string]string{"major": "1", "minor": "37", "gitVersion": "v1.37.0"})
	case path == "/api":
		writeJSON(w, http.StatusOK, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	case path == "/apis":
		writeJSON(w, http.StatusOK, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	case r.Method == http.MethodPost && path == "/churn":
		// Not the API: the benchmark's hook for one watch event, as a
		// Pod changing on a live cluster between two scrapes.
		c.mu.Lock()
		close(c.bump)
		c.bump = make(chan struct{})
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/api/v1/namespaces/") && strings.HasSuffix(path, "/pods"):
		c.admit(w, r, strings.Split(path, "/")[4])
	case r.Method != http.MethodGet:
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" "+path)
	case strings.HasSuffix(path, "/resourcequotas"):
		c.list(w, r, "ResourceQuota", 0, nil)
	case path == "/api/v1/nodes":
		n := c.nodes
		if c.spareNode {
			n++
		}
		c.serve(w, r, "Node", n, c.writeNode)
	case path == "/api/v1/namespaces":
		c.serve(w, r, "Namespace", 3+c.namespaces, c.writeNamespace)
	case path == "/api/v1/pods" && strings.Contains(q.Get("fieldSelector"), "status.nominatedNodeName!=") && !c.ignoreFieldSelector:
		// The watch of Pods nominated to a node: none here, as the API
		// server selects them (no preemption is under way).
		c.serve(w, r, "Pod", 0, c.writePod)
	case path == "/api/v1/pods" && q.Get("fieldSelector") != "":
		// The schedule watch's Pods: bound ones, and the Pending ones
		// when the selector is ignored or does not ask for bound ones.
		n := c.boundPods + c.overBound
		if c.ignoreFieldSelector || !strings.Contains(q.Get("fieldSelector"), "spec.nodeName!=") {
			n += c.pendingPods
		}
		c.serve(w, r, "Pod", n, c.writePod)
	case strings.HasSuffix(path, "/pods"):
		// The check's own list (label selector, limit): no proxy runs.
		c.list(w, r, "Pod", 0, nil)
	default:
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource "+path)
	}
}

// admit answers a dry-run create with the Pod it was sent, named, as the
// API server answers one it admitted.
func (c *cluster) admit(w http.ResponseWriter, r *http.Request, ns string) {
	if r.URL.Query().Get("dryRun") != "All" {
		status(w, http.StatusBadRequest, "BadRequest", "this stand-in takes dry runs only")
		return
	}
	var pod map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&pod); err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "decode the Pod: "+err.Error())
		return
	}
	md, _ := pod["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		pod["metadata"] = md
	}
	gen, _ := md["generateName"].(string)
	md["name"], md["namespace"], md["uid"] = gen+"x7k2p", ns, "dry-run-uid"
	md["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	pod["status"] = map[string]any{"phase": "Pending", "qosClass": "Burstable"}
	writeJSON(w, http.StatusCreated, pod)
}

// The writers below leave out the errors of a bufio.Writer's writes: they
// stick, and the Flush that follows returns them.

// serve answers a list (limit and continue honoured) or a watch of kind:
// a watch-list (sendInitialEvents=true) first sends every item as ADDED
// and the bookmark that ends them; then every watch stays open, sending
// the churn's MODIFIED Pods, until the client goes away.
func (c *cluster) serve(w http.ResponseWriter, r *http.Request, kind string, n int, item func(*bufio.Writer, int, int64)) {
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		c.list(w, r, kind, n, item)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		w.(http.Flusher).Flush()
		return nil
	}
	if q.Get("sendInitialEvents") == "true" {
		rv := c.rv.Load()
		for i := range n {
			_, _ = bw.WriteString(`{"type":"ADDED","object":`)
			item(bw, i, rv)
			_, _ = bw.WriteString("}\n")
			if bw.Buffered() > 32<<10 {
				if flush() != nil {
					return
				}
			}
		}
		fmt.Fprintf(bw, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":"v1","metadata":{"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, rv)
	}
	if flush() != nil {
		return
	}
	if kind != "Pod" || c.boundPods == 0 {
		<-r.Context().Done()
		return
	}
	// A ticker that never fires without -churn.
	t := time.NewTicker(time.Hour)
	if c.churn > 0 {
		t.Reset(c.churn)
	}
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		case <-c.bumped():
		}
		rv := c.rv.Add(1)
		_, _ = bw.WriteString(`{"type":"MODIFIED","object":`)
		c.writeBoundPod(bw, k%c.boundPods, rv, strconv.Itoa(k))
		_, _ = bw.WriteString("}\n")
		if flush() != nil {
			return
		}
	}
}

// list writes a list of kind, items [continue, continue+limit) of n.
func (c *cluster) list(w http.ResponseWriter, r *http.Request, kind string, n int, item func(*bufio.Writer, int, int64)) {
	q := r.URL.Query()
	from, _ := strconv.Atoi(q.Get("continue"))
	to := n
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && from+l < n {
		to = from + l
	}
	rv := c.rv.Load()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	cont := ""
	if to < n {
		cont = strconv.Itoa(to)
	}
	fmt.Fprintf(bw, `{"kind":"%sList","apiVersion":"v1","metadata":{"resourceVersion":"%d","continue":%q},"items":[`, kind, rv, cont)
	for i := from; i < to; i++ {
		if i > from {
			_ = bw.WriteByte(',')
		}
		item(bw, i, rv)
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
}

func (c *cluster) nodeName(i int) string {
	if i == c.nodes {
		return "spare-node"
	}
	return fmt.Sprintf("scale-node-%04d", i)
}

func (c *cluster) writeNode(bw *bufio.Writer, i int, rv int64) {
	name := c.nodeName(i)
	res := fmt.Sprintf(`{"cpu":%q,"memory":%q,"pods":%q}`, c.nodeCPU, c.nodeMem, c.nodePods)
	if i == c.nodes {
		fmt.Fprintf(bw, `{"kind":"Node","apiVersion":"v1","metadata":{"name":%q,"uid":"node-spare","resourceVersion":"%d","labels":{"kubernetes.io/hostname":%q}},"spec":{},"status":{"capacity":%s,"allocatable":%s,"conditions":[{"type":"Ready","status":"True"}]}}`,
			name, rv, name, res, res)
		return
	}
	fmt.Fprintf(bw, `{"kind":"Node","apiVersion":"v1","metadata":{"name":%q,"uid":"node-%d","resourceVersion":"%d","labels":{"kubernetes.io/hostname":%q,"topology.kubernetes.io/zone":"zone-%d"}},"spec":{},"status":{"capacity":%s,"allocatable":%s,"conditions":[{"type":"Ready","status":"True"}]}}`,
		name, i, rv, name, i%c.zones, res, res)
}

// writePod writes the i-th Pod: the bound ones with a term, then the
// over-bound ones, then the Pending ones.
func (c *cluster) writePod(bw *bufio.Writer, i int, rv int64) {
	switch {
	case i < c.boundPods:
		c.writeBoundPod(bw, i, rv, "")
	case i < c.boundPods+c.overBound:
		j := i - c.boundPods
		fmt.Fprintf(bw, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"huge-labels-%d","namespace":"tenant","uid":"huge-%d","resourceVersion":"%d","labels":{`, j, j, rv)
		for k := range c.overBoundLabels {
			if k > 0 {
				_ = bw.WriteByte(',')
			}
			fmt.Fprintf(bw, `"tenant.example.com/label-%05d":"value-%05d"`, k, k)
		}
		fmt.Fprintf(bw, `}},"spec":{"nodeName":%q,"containers":[{"name":"app","image":"app","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}]},"status":{"phase":"Running"}}`, c.nodeName(0))
	default:
		j := i - c.boundPods - c.overBound
		fmt.Fprintf(bw, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"pending-%d","namespace":"tenant","uid":"pending-%d","resourceVersion":"%d","labels":{`, j, j, rv)
		for k := range c.pendingLabels {
			if k > 0 {
				_ = bw.WriteByte(',')
			}
			// 16,000 of these: some 1.4 MB, under etcd's 1.5 MiB.
			fmt.Fprintf(bw, `"bulk.example.com/label-%05d":"%05d-%s"`, k, k, "0123456789abcdef0123456789abcdef0123456789")
		}
		_, _ = bw.WriteString(`}},"spec":{"containers":[{"name":"app","image":"app","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}]},"status":{"phase":"Pending"}}`)
	}
}

// writeBoundPod is issue 52's running Pod: 100m/128Mi on Node i mod
// nodes, one required anti-affinity term per node against its own
// instance (50 instances); revision, when set, is a label that changed.
func (c *cluster) writeBoundPod(bw *bufio.Writer, i int, rv int64, revision string) {
	rev := ""
	if revision != "" {
		rev = fmt.Sprintf(`,"revision":%q`, revision)
	}
	fmt.Fprintf(bw, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"app-%05d","namespace":"apps","uid":"uid-%05d","resourceVersion":"%d","labels":{"app.kubernetes.io/name":"app","app.kubernetes.io/instance":"app-%d","pod-template-hash":"5d8f7c9b6"%s}},`+
		`"spec":{"nodeName":%q,"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app.kubernetes.io/instance":"app-%d"}},"topologyKey":"kubernetes.io/hostname"}]}},`+
		`"containers":[{"name":"app","image":"app","resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}]},"status":{"phase":"Running"}}`,
		i, i, rv, i%50, rev, c.boundNode(i), i%50)
}

func (c *cluster) boundNode(i int) string {
	if c.spareNode {
		return c.nodeName(c.nodes)
	}
	return c.nodeName(i % c.nodes)
}

// writeNamespace writes apps, proxies and tenant, then the extra ones:
// ten labels (team-N among them) and annotations up to -namespace-bytes.
func (c *cluster) writeNamespace(bw *bufio.Writer, i int, rv int64) {
	if i < 3 {
		name := []string{"apps", "proxies", "tenant"}[i]
		fmt.Fprintf(bw, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":%q,"uid":"ns-%s","resourceVersion":"%d","labels":{"kubernetes.io/metadata.name":%q,"team":"proxies"}},"status":{"phase":"Active"}}`, name, name, rv, name)
		return
	}
	j := i - 3
	name := fmt.Sprintf("ns-%05d", j)
	fmt.Fprintf(bw, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":%q,"uid":"ns-%d","resourceVersion":"%d","labels":{"kubernetes.io/metadata.name":%q,"team":"team-%d"`, name, j, rv, name, j%100)
	written := 0
	for k := range 8 {
		fmt.Fprintf(bw, `,"tenant.example.com/label-%d":"%s"`, k, strings.Repeat("v", 60))
		written += 90
	}
	_, _ = bw.WriteString(`},"annotations":{`)
	chunk := strings.Repeat("a", 1000)
	for k := 0; written < c.nsBytes; k++ {
		if k > 0 {
			_ = bw.WriteByte(',')
		}
		fmt.Fprintf(bw, `"tenant.example.com/note-%d":%q`, k, chunk)
		written += 1030
	}
	_, _ = bw.WriteString(`}},"status":{"phase":"Active"}}`)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code})
}
