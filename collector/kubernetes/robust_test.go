package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// What an API server sends cannot hang, crash or bloat a check
// (docs/security.md: "Strings, labels and pages"): the answers here are
// written byte by byte, in JSON and in protobuf, with what
// resource.Quantity cannot bear and names no label may carry.

// protoMessage appends field num holding the message fields.
func protoMessage(b []byte, num protowire.Number, fields []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, fields)
}

func protoString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// protoQuantities is a map<string, Quantity> field.
func protoQuantities(b []byte, num protowire.Number, m map[string]string) []byte {
	for k, v := range m {
		entry := protoString(nil, entryKey, k)
		entry = protoMessage(entry, entryValue, protoString(nil, quantityString, v))
		b = protoMessage(b, num, entry)
	}
	return b
}

// protobufAnswer wraps raw, a kind's protobuf encoding, in the API
// server's envelope.
func protobufAnswer(t *testing.T, kind string, raw []byte) []byte {
	t.Helper()
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: raw, ContentType: "application/vnd.kubernetes.protobuf"}
	b, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, protobufMagic...), b...)
}

// quotaListProtobuf is a ResourceQuotaList in protobuf as the API server
// writes it, with any name and quantity text.
func quotaListProtobuf(t *testing.T, quotas ...rawQuota) []byte {
	t.Helper()
	var list []byte
	list = protoMessage(list, 1, nil) // ListMeta
	for _, q := range quotas {
		var rq []byte
		rq = protoMessage(rq, quotaMetadata, protoString(protoString(nil, metadataName, q.Name), 3, headroomNamespace))
		rq = protoMessage(rq, quotaSpec, protoQuantities(nil, specHard, q.SpecHard))
		rq = protoMessage(rq, quotaStatus, protoQuantities(protoQuantities(nil, statusHard, q.StatusHard), statusUsed, q.Used))
		list = protoMessage(list, listItems, rq)
	}
	return protobufAnswer(t, "ResourceQuotaList", list)
}

func writeProtobuf(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
	_, _ = w.Write(b)
}

// headroomChecker is a checker of srv with the headroom keys of cfg.
func headroomChecker(t *testing.T, srv *apiServer, cfg Entry, logger *slog.Logger) *Checker {
	t.Helper()
	cfg.Name, cfg.Kubeconfig, cfg.LabelSelector = "test", kubeconfig(t, srv.URL, srv.caPEM(), nil), testSelector
	cfg.Namespace = headroomNamespace
	c, err := New(&cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// collected counts the metrics the facts of v send, checking that each
// can be written.
func collected(t *testing.T, v provider.Verdict) int {
	t.Helper()
	if v.Facts == nil {
		return 0
	}
	ch := make(chan prometheus.Metric, 100)
	go func() { v.Facts.Collect(ch, "test", TargetName); close(ch) }()
	n := 0
	for m := range ch {
		var dm dto.Metric
		if err := m.Write(&dm); err != nil {
			t.Errorf("metric %s: %v", m.Desc(), err)
		}
		n++
	}
	return n
}

// TestQuotaAnswersAPIServersCannotMean: a quota list in protobuf (which
// client-go decodes whatever it asked for) with a name that is not UTF-8,
// quantities no cluster could mean, or beyond what one can hold. The check
// returns, with a clear reason and a bounded message; the broken name is
// judged, logged once, and exported by no series.
func TestQuotaAnswersAPIServersCannotMean(t *testing.T) {
	t.Parallel()
	good := rawQuota{Name: "compute", SpecHard: map[string]string{"pods": "10"}, StatusHard: map[string]string{"pods": "10"}, Used: map[string]string{"pods": "3"}}
	for _, tc := range []struct {
		name   string
		quotas []rawQuota
		json   bool
		want   provider.Reason
		msg    string
		// exported are the quota names that must have series.
		exported []string
		warned   string
	}{
		{"name not UTF-8", []rawQuota{good, {Name: "q\xff\xfe", SpecHard: map[string]string{"pods": "5"}, Used: map[string]string{"pods": "5"}}}, false,
			ReasonQuotaExhausted, "quota q\ufffd\ufffd in namespace egress-proxies: pods used 5 of hard 5 leaves 0, 1 required", []string{"compute"}, "quota name is no valid label value"},
		{"name of 1 MiB", []rawQuota{good, {Name: strings.Repeat("q", 1<<20), SpecHard: map[string]string{"pods": "5"}, Used: map[string]string{"pods": "1"}}}, true,
			provider.ReasonReady, "", []string{"compute"}, "quota name is no valid label value"},
		{"hard 1e1000000000", []rawQuota{good, {Name: "huge", SpecHard: map[string]string{"pods": "1e1000000000"}, Used: map[string]string{"pods": "1"}}}, false,
			provider.ReasonBadResponse, "quota huge in namespace egress-proxies: hard pods: quantity \"1e1000000000\": magnitude beyond 10^±64", nil, ""},
		{"used 1e-1000000000", []rawQuota{{Name: "tiny", SpecHard: map[string]string{"pods": "10"}, Used: map[string]string{"pods": "1e-1000000000"}}}, true,
			provider.ReasonBadResponse, "used pods: quantity \"1e-1000000000\": magnitude beyond", nil, ""},
		{"hard beyond any cluster, clamped", []rawQuota{{Name: "vast", SpecHard: map[string]string{"pods": "1e30"}, Used: map[string]string{"pods": "-1e30"}}}, false,
			provider.ReasonReady, "", []string{"vast"}, ""},
		{"not a quantity", []rawQuota{{Name: "word", SpecHard: map[string]string{"pods": "lots"}, Used: map[string]string{"pods": "1"}}}, true,
			provider.ReasonBadResponse, "no digits", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/api/v1/pods":
					writePodList(w)
				case tc.json:
					writeJSON(w, jsonQuotaList(tc.quotas))
				default:
					writeProtobuf(w, quotaListProtobuf(t, tc.quotas...))
				}
			})
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			c := headroomChecker(t, srv, Entry{MinQuotaHeadroom: map[string]string{"pods": "1"}}, logger)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range 2 {
				v := c.Check(ctx, logger, TargetName)
				if v.Reason != tc.want || (tc.msg == "") != (v.Reason == provider.ReasonReady) || !strings.Contains(v.Message, tc.msg) {
					t.Fatalf("check %d: %s %q, want %s with %q", i, v.Reason, v.Message, tc.want, tc.msg)
				}
				if len(v.Message) > provider.MaxProviderString+200 || !utf8.ValidString(v.Message) {
					t.Errorf("message of %d bytes (valid UTF-8: %v)", len(v.Message), utf8.ValidString(v.Message))
				}
				if n := collected(t, v); n != 2*len(tc.exported) {
					t.Errorf("%d quota series, want hard and used of %v", n, tc.exported)
				}
				if v.Facts != nil {
					for _, u := range v.Facts.(*Facts).Quotas {
						exported := !u.NoSeries
						if exported != contains(tc.exported, u.Quota) {
							t.Errorf("quota %.20q exported %v, want %v", u.Quota, exported, !exported)
						}
						if len(u.Quota) > provider.MaxProviderString+64 {
							t.Errorf("quota name of %d bytes kept", len(u.Quota))
						}
					}
				}
			}
			if tc.warned != "" && strings.Count(logs.String(), tc.warned) != 1 {
				t.Errorf("want one warning %q over two checks, log:\n%.2000s", tc.warned, logs.String())
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func jsonQuotaList(quotas []rawQuota) any {
	type item struct {
		Metadata map[string]string `json:"metadata"`
		Spec     map[string]any    `json:"spec"`
		Status   map[string]any    `json:"status"`
	}
	list := struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Items      []item `json:"items"`
	}{Kind: "ResourceQuotaList", APIVersion: "v1"}
	for _, q := range quotas {
		list.Items = append(list.Items, item{
			Metadata: map[string]string{"name": q.Name, "namespace": headroomNamespace},
			Spec:     map[string]any{"hard": q.SpecHard},
			Status:   map[string]any{"hard": q.StatusHard, "used": q.Used},
		})
	}
	return list
}

// TestQuotaListDecoding: what the two decoders read of an answer, and
// what they refuse.
func TestQuotaListDecoding(t *testing.T) {
	t.Parallel()
	qs, err := quotaListProto(mustUnwrap(t, quotaListProtobuf(t, rawQuota{Name: "compute", SpecHard: map[string]string{"pods": "10"}, Used: map[string]string{"pods": "2", "services": "1"}})))
	if err != nil || len(qs) != 1 || qs[0].Name != "compute" || qs[0].SpecHard["pods"] != "10" || qs[0].Used["services"] != "1" {
		t.Errorf("protobuf: %+v, %v", qs, err)
	}
	if _, err := quotaListProto([]byte{0x12, 0xff}); err == nil {
		t.Error("truncated protobuf: no error")
	}
	var raw struct {
		Items []struct {
			Spec struct {
				Hard map[string]jsonQuantity `json:"hard"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(`{"items":[{"spec":{"hard":{"pods":10,"cpu":"500m"}}}]}`), &raw); err != nil ||
		raw.Items[0].Spec.Hard["pods"] != "10" || raw.Items[0].Spec.Hard["cpu"] != "500m" {
		t.Errorf("a quantity as a bare number: %+v, %v", raw, err)
	}
	if err := json.Unmarshal([]byte(`{"items":[{"spec":{"hard":{"pods":true}}}]}`), &raw); err == nil {
		t.Error("a quantity that is a boolean: no error")
	}
}

func mustUnwrap(t *testing.T, b []byte) []byte {
	t.Helper()
	_, raw, err := unwrap(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// podListProtobuf is a PodList of one Pod whose container requests cpu,
// in protobuf: PodSpec.containers (2), Container.resources (8),
// ResourceRequirements.requests (2).
func podListProtobuf(t *testing.T, cpu string) []byte {
	t.Helper()
	list := protoMessage(protoMessage(nil, 1, nil), 2, podProtobuf(cpu))
	return protobufAnswer(t, "PodList", list)
}

// podProtobuf is a Pod named proxy-0 whose container requests cpu.
func podProtobuf(cpu string) []byte {
	resources := protoQuantities(nil, 2, map[string]string{"cpu": cpu})
	container := protoMessage(protoString(nil, 1, "proxy"), 8, resources)
	pod := protoMessage(nil, 1, protoString(nil, 1, "proxy-0"))
	return protoMessage(pod, 2, protoMessage(nil, 2, container))
}

// TestDryRunAnswerIsReadAsMetadata: the Pod a dry run sends back carries
// the quantities admission set; one resource.Quantity cannot parse does
// not hang the check, in JSON or in protobuf, and another kind is
// BadResponse.
func TestDryRunAnswerIsReadAsMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer http.HandlerFunc
		want   provider.Reason
	}{
		{"json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"egress-proxy-x7k2p"},"spec":{"containers":[{"name":"proxy","resources":{"requests":{"cpu":"1e-1000000000"}}}]}}`)
		}, provider.ReasonReady},
		{"protobuf", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(protobufAnswer(t, "Pod", podProtobuf("1e-1000000000")))
		}, provider.ReasonReady},
		{"another kind", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`)
		}, provider.ReasonBadResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &dryRunAPI{t: t, post: tc.answer}
			srv := newAPIServer(t, true, api.serve)
			c := dryRunChecker(t, srv, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName); v.Reason != tc.want {
				t.Errorf("%s %q, want %s", v.Reason, v.Message, tc.want)
			}
		})
	}
}

// TestPodListIsReadAsMetadata: the list call asks for the Pods' metadata
// only, and whatever the server answers — the metadata list, a PodList in
// JSON or in protobuf — no Pod quantity is parsed: one of
// "1e-1000000000", which resource.ParseQuantity never finishes, is Ready
// within the check's deadline, and with the same one request.
func TestPodListIsReadAsMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(t *testing.T, w http.ResponseWriter)
		want   provider.Reason
		msg    string
	}{
		{"metadata list", func(_ *testing.T, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[{"metadata":{"name":"proxy-0"}}]}`)
		}, provider.ReasonReady, "managed pods present"},
		{"PodList in JSON with a quantity resource.Quantity cannot parse", func(_ *testing.T, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"proxy-0"},"spec":{"containers":[{"name":"proxy","resources":{"requests":{"cpu":"1e-1000000000"}}}]}}]}`)
		}, provider.ReasonReady, "managed pods present"},
		{"PodList in protobuf with that quantity", func(t *testing.T, w http.ResponseWriter) {
			writeProtobuf(w, podListProtobuf(t, "1e-1000000000"))
		}, provider.ReasonReady, "managed pods present"},
		{"protobuf of another kind", func(t *testing.T, w http.ResponseWriter) {
			writeProtobuf(w, protobufAnswer(t, "Namespace", nil))
		}, provider.ReasonBadResponse, `got a "Namespace", want a PodList`},
		{"protobuf without its envelope", func(_ *testing.T, w http.ResponseWriter) {
			writeProtobuf(w, []byte("\x0a\x02hi"))
		}, provider.ReasonBadResponse, "without the k8s envelope"},
		{"yaml", func(_ *testing.T, w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = io.WriteString(w, "kind: PodList\n")
		}, provider.ReasonBadResponse, `content type "application/yaml", want application/json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Accept"); !strings.Contains(got, "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1") {
					t.Errorf("Accept %q asks for whole Pods", got)
				}
				tc.answer(t, w)
			})
			c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
			if v.Reason != tc.want || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("%s %q, want %s with %q", v.Reason, v.Message, tc.want, tc.msg)
			}
			if n := srv.hits.Load(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// TestReviewsAreBounded: 20 can_i entries whose reviews answer no with a
// 60 KiB reason: at most ReviewConcurrency in flight at once, Forbidden
// with a bounded message. Reasons of 4 MB are over the 64 KiB an access
// review's answer may have: BadResponse naming that limit.
func TestReviewsAreBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason int
		want   provider.Reason
		msg    string
	}{
		{"60 KiB reasons", 60 << 10, provider.ReasonForbidden, "cannot create pods0 in namespace egress-proxies: xxxx"},
		{"4 MB reasons", 4 << 20, provider.ReasonBadResponse, "the response body is larger than the exporter's limit of 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var inflight, most atomic.Int32
			srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/pods" {
					writePodList(w)
					return
				}
				// A review is counted from its arrival until its answer
				// starts, a span inside the client's slot; not until the
				// handler returns: a handler still writing 4 MB to a client
				// that gave up at 64 KiB, and freed its slot for the next
				// review, is no longer in flight for the check.
				raise := func(n int32) {
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
				}
				raise(inflight.Add(1))
				var rev authorizationv1.SelfSubjectAccessReview
				err := json.NewDecoder(r.Body).Decode(&rev)
				// A moment for more reviews to arrive, so that a check
				// sending more than ReviewConcurrency at once shows it (the
				// wait ends early once it has). It only makes an excess
				// likelier to be seen, never a pass a failure.
				for wait := time.Now().Add(100 * time.Millisecond); inflight.Load() <= ReviewConcurrency && time.Now().Before(wait); {
					time.Sleep(time.Millisecond)
				}
				raise(inflight.Load())
				inflight.Add(-1)
				if err != nil {
					t.Error(err)
					return
				}
				rev.Status.Reason = strings.Repeat("x", tc.reason)
				writeJSON(w, &rev)
			})
			var canI []string
			for i := range 20 {
				canI = append(canI, fmt.Sprintf("create pods%d", i))
			}
			c := headroomChecker(t, srv, Entry{CanI: canI}, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
			if v.Reason != tc.want || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("%s %.300q, want %s with %q", v.Reason, v.Message, tc.want, tc.msg)
			}
			// The check's message joins 20 cut reasons; the engine cuts
			// the whole to one bound.
			if n := len(provider.BoundString(v.Message)); n > provider.MaxProviderString+64 {
				t.Errorf("message of %d bytes", n)
			}
			if m := most.Load(); m > ReviewConcurrency {
				t.Errorf("%d reviews in flight at once, want at most %d", m, ReviewConcurrency)
			}
		})
	}
}

// TestBodyLimitOfReviews: a review's body limit is its own; the list call
// keeps provider.MaxBodyBytes.
func TestBodyLimitOfReviews(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte(" "), 100<<10)
	srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/pods" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
			_, _ = w.Write(big) // JSON allows trailing space: 100 KiB, under 4 MiB
			return
		}
		http.Error(w, "unexpected", http.StatusTeapot)
	})
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	if v := check(c); v.Reason != provider.ReasonReady {
		t.Errorf("a 100 KiB list answer: %s %q, want Ready", v.Reason, v.Message)
	}
}

// syncBuffer is a log destination for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p) //nolint:wrapcheck // a buffer
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
