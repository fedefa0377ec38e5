package kubernetes

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// wire writes objects as a hostile API server would, in JSON or
// protobuf, including what resource.Quantity cannot even be built with
// ("1e-1000000000" would keep resource.MustParse busy for minutes).
type wire struct{ protobuf bool }

func (w wire) name() string {
	if w.protobuf {
		return "protobuf"
	}
	return "JSON"
}

func (w wire) contentType() string {
	if w.protobuf {
		return runtime.ContentTypeProtobuf
	}
	return runtime.ContentTypeJSON
}

// item is obj as a list item: JSON, or its protobuf message.
func (w wire) item(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	if w.protobuf {
		b, err := obj.(interface{ Marshal() ([]byte, error) }).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// object is an item as a whole answer or a watch event's object: in
// protobuf, inside the k8s envelope.
func (w wire) object(kind string, item []byte) []byte {
	if !w.protobuf {
		return item
	}
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: item, ContentType: runtime.ContentTypeProtobuf}
	b, _ := unk.Marshal()
	return append([]byte("k8s\x00"), b...)
}

func (w wire) list(kind string, items [][]byte) []byte {
	if !w.protobuf {
		return []byte(`{"kind":"` + kind + `","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[` + string(bytes.Join(items, []byte(","))) + `]}`)
	}
	meta, _ := (&metav1.ListMeta{ResourceVersion: "10"}).Marshal()
	b := nest(1, meta)
	for _, it := range items {
		b = append(b, nest(2, it)...)
	}
	return w.object(kind, b)
}

// event is one framed watch event.
func (w wire) event(typ string, object []byte) []byte {
	if !w.protobuf {
		return []byte(`{"type":"` + typ + `","object":` + string(object) + "}\n")
	}
	b, _ := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: object}}).Marshal()
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// nest is a length-delimited protobuf field.
func nest(num protowire.Number, inner []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner)
}

// placeholder is the quantity a test writes where the wire then puts an
// unreadable one.
const placeholder = "7777m"

// withQuantity is item with the quantity placeholder (JSON) replaced by
// text, or (protobuf) with the map entry key: text added at the path of
// field numbers, as a second occurrence the decoder merges.
func (w wire) withQuantity(item []byte, text, key string, path ...protowire.Number) []byte {
	if !w.protobuf {
		return bytes.ReplaceAll(item, []byte(strconv.Quote(placeholder)), []byte(strconv.Quote(text)))
	}
	b := append(nest(1, []byte(key)), nest(2, nest(1, []byte(text)))...)
	for i := len(path) - 1; i >= 0; i-- {
		b = nest(path[i], b)
	}
	return append(bytes.Clone(item), b...)
}

// hostileAPI serves the watches' lists and watches of nodes and pods in
// one content type: each a list of items, then, on a watch-list, the items
// as ADDED events and the bookmark; then after (nil: nothing) writes what
// else the stream holds, and the stream stays open.
type hostileAPI struct {
	*httptest.Server
	w          wire
	kinds      map[string]string // resource → the kind answered ("Node")
	items      map[string][][]byte
	after      map[string]func(http.ResponseWriter)
	calls      map[string]*atomic.Int64
	wroteAfter atomic.Int64
	// failing, once closed, makes every call of the nodes a 500
	// (failingStatus) and ends the watches.
	failing chan struct{}
	// headerBytes, when set, pads the headers of every answer of the
	// nodes to about that many bytes.
	headerBytes int
}

func newHostileAPI(t *testing.T, w wire) *hostileAPI {
	t.Helper()
	h := &hostileAPI{w: w, kinds: map[string]string{"nodes": "Node", "pods": "Pod", "namespaces": "Namespace"}, items: map[string][][]byte{},
		after: map[string]func(http.ResponseWriter){}, calls: map[string]*atomic.Int64{"nodes": {}, "pods": {}, "namespaces": {}}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *hostileAPI) serve(rw http.ResponseWriter, r *http.Request) {
	res := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	kind, ok := h.kinds[res]
	if !ok {
		http.NotFound(rw, r)
		return
	}
	h.calls[res].Add(1)
	if h.failing != nil && res == "nodes" {
		select {
		case <-h.failing:
			failingStatus(rw)
			return
		default:
		}
	}
	rw.Header().Set("Content-Type", h.w.contentType())
	if res == "nodes" {
		for i := range h.headerBytes / (8 << 10) {
			rw.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("h", 8<<10))
		}
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		_, _ = rw.Write(h.w.list(kind+"List", h.items[res]))
		return
	}
	rw.WriteHeader(http.StatusOK)
	if q.Get("sendInitialEvents") == "true" {
		for _, it := range h.items[res] {
			_, _ = rw.Write(h.w.event("ADDED", h.w.object(kind, it)))
		}
		bookmark := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		var b []byte
		if h.w.protobuf {
			b, _ = (&corev1.Node{ObjectMeta: bookmark.ObjectMeta}).Marshal()
		} else {
			bookmark.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: "v1"}
			b, _ = json.Marshal(bookmark)
		}
		_, _ = rw.Write(h.w.event("BOOKMARK", h.w.object(kind, b)))
	}
	rw.(http.Flusher).Flush()
	if f := h.after[res]; f != nil {
		f(rw)
	}
	if h.failing != nil {
		select {
		case <-h.failing:
		case <-r.Context().Done():
		}
		return
	}
	<-r.Context().Done()
}

func (h *hostileAPI) client() *client {
	return &client{host: h.URL, watchCfg: &rest.Config{Host: h.URL}}
}

// watchUntil starts the watches of h and returns them; closed at the
// end of the test (registered before anything can fail).
func watchUntil(t *testing.T, h *hostileAPI) *watchSet {
	t.Helper()
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	t.Cleanup(func() {
		if err := w.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return w.ensure(h.client())
}

// syncedWithin waits for ws's caches, failing (never hanging) after a
// bound far beyond what a sync takes on any machine: a quantity that
// reached resource.ParseQuantity would keep it busy for minutes.
func syncedWithin(t *testing.T, ws *watchSet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if !ws.waitSynced(ctx) {
		_, msg, _ := ws.verdict(time.Now())
		t.Fatalf("caches never synced: %s", msg)
	}
}

// TestWatchQuantitiesBounded: a Node whose allocatable cpu is
// 1e-1000000000 and a Pod whose memory request is 1e2147483647 (0 to
// client-go's parser) do not stall the caches: the Node and the node of
// the Pod take no copy, with the cause in the message, and the others
// are fitted as usual. With the check dropped, resource.ParseQuantity
// grinds for minutes and the caches never sync.
func TestWatchQuantitiesBounded(t *testing.T) {
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			h := newHostileAPI(t, w)
			node := func(name string, mut func(*corev1.Node)) []byte {
				n := fitNode(name, mut)
				n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
				n.ResourceVersion = "5"
				return w.item(t, n)
			}
			bad := node("bad", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(placeholder) })
			h.items["nodes"] = [][]byte{
				node("good", nil),
				w.withQuantity(bad, "1e-1000000000", "cpu", 3, 2), // status.allocatable
				node("full", nil),
			}
			pod := func(name, nodeName string, req ...string) []byte {
				p := boundPod(nodeName, req...)
				p.Name, p.ResourceVersion = name, "6"
				p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
				return w.item(t, p)
			}
			h.items["pods"] = [][]byte{
				pod("small", "good", "cpu", "1"),
				// spec.containers[].resources.requests
				w.withQuantity(pod("hog", "full", "memory", placeholder), "1e2147483647", "memory", 2, 2, 8, 2),
			}
			nodes := fitsGoodNodeOnly(t, h, w.protobuf)
			for _, n := range nodes {
				if n.Name == "bad" && n.Labels["kubernetes.io/hostname"] != "bad" {
					t.Errorf("the stub of the bad node lost its labels: %+v", n.ObjectMeta)
				}
			}
		})
	}
}

// TestBoundedDecoderLists decodes the answer of a list call as the
// informer's list does: one item with a quantity that cannot be read is
// a stub, the others are whole; a list of another kind is a bad response
// naming it.
func TestBoundedDecoderLists(t *testing.T) {
	t.Parallel()
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			t.Parallel()
			d := boundedCodecs{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), kind: "Node"}
			var dec runtime.Decoder
			for _, info := range d.SupportedMediaTypes() {
				if info.MediaType == w.contentType() {
					dec = info.Serializer
				}
			}
			if dec == nil {
				t.Fatalf("no decoder for %s", w.contentType())
			}
			good := fitNode("good", nil)
			bad := fitNode("bad", nil, "cpu", placeholder, "pods", "110")
			body := w.list("NodeList", [][]byte{w.item(t, good), w.withQuantity(w.item(t, bad), strings.Repeat("9", 65), "cpu", 3, 2)})
			var list corev1.NodeList
			if _, _, err := dec.Decode(body, nil, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 2 || list.ResourceVersion != "10" {
				t.Fatalf("decoded %d items at %q, want 2 at 10", len(list.Items), list.ResourceVersion)
			}
			if list.Items[0].Status.Allocatable.Cpu().String() != "4" || len(list.Items[0].Annotations) != 0 {
				t.Errorf("good node decoded as %+v", list.Items[0])
			}
			if why := list.Items[1].Annotations[unreadableAnnotation]; !strings.Contains(why, "65 characters, longer than the 64") || len(list.Items[1].Status.Allocatable) != 0 {
				t.Errorf("bad node decoded as %+v", list.Items[1])
			}

			cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "x"}}
			_, _, err := dec.Decode(w.list("ConfigMapList", [][]byte{w.item(t, cm)}), nil, &corev1.NodeList{})
			if bad := (*badResponseError)(nil); !errors.As(err, &bad) || !strings.Contains(err.Error(), `the list of nodes is a "ConfigMapList", want a NodeList`) {
				t.Errorf("a ConfigMapList decoded as the nodes: %v", err)
			}
			_, _, err = dec.Decode(w.object("ConfigMap", w.item(t, cm)), nil, nil)
			if !strings.Contains(fmt.Sprint(err), `an event of the watch of nodes is a "ConfigMap", want a Node`) {
				t.Errorf("a ConfigMap decoded as a node: %v", err)
			}
		})
	}
}

// TestWatchWrongKindIsBadResponse: an API server that answers the watch
// of nodes with ConfigMaps (list and events) fails the cache as a bad
// response naming what came back, never an empty cluster.
func TestWatchWrongKindIsBadResponse(t *testing.T) {
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			h := newHostileAPI(t, w)
			h.kinds["nodes"] = "ConfigMap"
			cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "3"}}
			h.items["nodes"] = [][]byte{w.item(t, cm)}
			ws := watchUntil(t, h)
			var reason provider.Reason
			var msg string
			waitWithin(t, time.Minute, "a BadResponse verdict", func() bool {
				reason, msg, _ = ws.verdict(time.Now())
				return reason == provider.ReasonBadResponse
			})
			if !strings.Contains(msg, `nodes is a "ConfigMap`) || !strings.Contains(msg, "want a Node") {
				t.Errorf("message %q does not name what came back", msg)
			}
		})
	}
}

// TestWatchEventTooLarge: after a good list, a 400 MiB event, in JSON or
// protobuf, ends the watch with an error naming the limit; the informer
// lists again; the client reads not much more than the limit of it.
func TestWatchEventTooLarge(t *testing.T) {
	const huge = 400 << 20
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			h := newHostileAPI(t, w)
			n := fitNode("n1", nil)
			n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
			n.ResourceVersion = "5"
			h.items["nodes"] = [][]byte{w.item(t, n)}
			h.after["nodes"] = func(rw http.ResponseWriter) {
				var head []byte
				if w.protobuf {
					head = binary.BigEndian.AppendUint32(nil, huge)
				} else {
					head = []byte(`{"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","annotations":{"a":"`)
				}
				if _, err := rw.Write(head); err != nil {
					return
				}
				chunk := bytes.Repeat([]byte("x"), 64<<10)
				for sent := 0; sent < huge; sent += len(chunk) {
					if _, err := rw.Write(chunk); err != nil {
						return
					}
					h.wroteAfter.Add(int64(len(chunk)))
				}
			}
			ws := watchUntil(t, h)
			syncedWithin(t, ws)
			var msg string
			waitWithin(t, time.Minute, "a BadResponse verdict", func() bool {
				var reason provider.Reason
				reason, msg, _ = ws.verdict(time.Now())
				return reason == provider.ReasonBadResponse
			})
			if !strings.Contains(msg, "the watch of nodes") || !strings.Contains(msg, "over the limit of 16 MiB") {
				t.Errorf("message %q does not name the watch and the limit", msg)
			}
			waitWithin(t, time.Minute, "a second watch of nodes", func() bool { return h.calls["nodes"].Load() >= 2 })
			// What the server could write is what the client read, plus
			// the sockets' buffers: never the whole event.
			if wrote := h.wroteAfter.Load(); wrote > 48<<20 {
				t.Errorf("the server wrote %d MiB of the event before the client stopped reading", wrote>>20)
			}
		})
	}
}

// TestWatchHeadersBounded: the watches read no more of an answer's headers
// than every other request of the exporter, provider.MaxHeaderBytes
// (net/http would read 10 MB): an API server that answers the list of
// nodes with 1 MiB of headers fails the cache as BadResponse naming the
// limit, though the watches' bodies are not bounded by
// provider.BoundedTransport.
func TestWatchHeadersBounded(t *testing.T) {
	h := newHostileAPI(t, wire{protobuf: true})
	h.headerBytes = 1 << 20
	ws := watchUntil(t, h)
	var msg string
	waitWithin(t, time.Minute, "a BadResponse verdict", func() bool {
		var reason provider.Reason
		reason, msg, _ = ws.verdict(time.Now())
		return reason == provider.ReasonBadResponse
	})
	if !strings.Contains(msg, "the watch of nodes") || !strings.Contains(msg, "limit of 64 KiB") {
		t.Errorf("message %q does not name the watch and the limit", msg)
	}
}

// TestStubFieldNumbers: the protobuf field numbers the stub reads are
// those of the generated types.
func TestStubFieldNumbers(t *testing.T) {
	t.Parallel()
	num := func(v any, field string) int {
		f, ok := reflect.TypeOf(v).FieldByName(field)
		if !ok {
			t.Fatalf("%T has no field %s", v, field)
		}
		n, _ := strconv.Atoi(strings.Split(f.Tag.Get("protobuf"), ",")[1])
		return n
	}
	for _, c := range []struct {
		got, want int
		what      string
	}{
		{objectMetadata, num(corev1.Node{}, "ObjectMeta"), "Node.metadata"},
		{objectMetadata, num(corev1.Pod{}, "ObjectMeta"), "Pod.metadata"},
		{podSpecField, num(corev1.Pod{}, "Spec"), "Pod.spec"},
		{podStatusField, num(corev1.Pod{}, "Status"), "Pod.status"},
		{specNodeName, num(corev1.PodSpec{}, "NodeName"), "PodSpec.nodeName"},
		{statusPhase, num(corev1.PodStatus{}, "Phase"), "PodStatus.phase"},
	} {
		if c.got != c.want {
			t.Errorf("%s is field %d, not %d", c.what, c.want, c.got)
		}
	}
}

// TestQuantitySchemaFindsEveryQuantity: the schema reaches quantities
// deep in a Pod (an emptyDir's size limit, an ephemeral volume's claim
// template, a container status's allocated resources) and in a Node.
func TestQuantitySchemaFindsEveryQuantity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind string
		path []string
	}{
		{"Node", []string{"status", "capacity"}},
		{"Node", []string{"status", "allocatable"}},
		{"Pod", []string{"spec", "volumes", "emptyDir", "sizeLimit"}},
		{"Pod", []string{"spec", "volumes", "ephemeral", "volumeClaimTemplate", "spec", "resources", "requests"}},
		{"Pod", []string{"spec", "overhead"}},
		{"Pod", []string{"spec", "initContainers", "resources", "limits"}},
		{"Pod", []string{"status", "containerStatuses", "allocatedResources"}},
	} {
		n := quantitySchema(c.kind)
		for _, p := range c.path {
			for n != nil && n.kind == qSlice {
				n = n.elem
			}
			if n == nil || n.json[p].node == nil {
				t.Errorf("%s: no quantity under %s", c.kind, strings.Join(c.path, "."))
				n = nil
				break
			}
			n = n.json[p].node
		}
		if n != nil && n.kind != qQuantity && (n.kind != qMap || n.elem.kind != qQuantity) {
			t.Errorf("%s: %s is not a quantity", c.kind, strings.Join(c.path, "."))
		}
	}
}

// fitsGoodNodeOnly watches h's Nodes and Pods until synced and fits a Pod
// of one CPU on them: the caches are usable, the good node takes 3 copies
// and the message names the node with an unreadable allocatable and the
// node of egress-proxies/hog, whose memory request cannot be read
// (protobuf names the container without its index). It returns the nodes.
func fitsGoodNodeOnly(t *testing.T, h *hostileAPI, protobuf bool) []*corev1.Node {
	t.Helper()
	ws := watchUntil(t, h)
	syncedWithin(t, ws)
	if reason, msg, ok := ws.verdict(time.Now()); !ok {
		t.Fatalf("verdict %s %s, want the caches usable", reason, msg)
	}
	nodes, pods := ws.snapshot()
	res := fit(fitPod(nil, "cpu", "1"), nodes, nodeUsage(pods))
	msg := res.Message()
	if res.Copies != 3 || res.Fitting != 1 {
		t.Errorf("fit %d copies on %d nodes, want 3 on the good node only: %s", res.Copies, res.Fitting, msg)
	}
	for _, want := range []string{
		`1 node(s) with a quantity that cannot be read (status.allocatable[cpu]: quantity "1e-1000000000": magnitude beyond 10^±64`,
		`1 node(s) with a bound Pod whose quantities cannot be read (egress-proxies/hog: spec.containers[0].resources.requests[memory]: quantity "1e2147483647"`,
	} {
		if protobuf {
			want = strings.ReplaceAll(want, "containers[0]", "containers")
		}
		if !strings.Contains(msg, want) {
			t.Errorf("message %q\ndoes not say %q", msg, want)
		}
	}
	return nodes
}
