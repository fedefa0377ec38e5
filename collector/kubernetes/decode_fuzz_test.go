package kubernetes

import (
	"testing"
	"time"
)

// FuzzServerAnswers: whatever bytes an API server answers the list call,
// the dry run or the quota list with, in JSON or protobuf, decoding them and reading
// every quantity returns promptly (no resource.ParseQuantity on them)
// with an answer or an error, and the errors are bounded.
func FuzzServerAnswers(f *testing.F) {
	f.Add([]byte(`{"kind":"ResourceQuotaList","items":[{"metadata":{"name":"q"},"spec":{"hard":{"pods":"1e-1000000000"}},"status":{"used":{"pods":3}}}]}`), false)
	f.Add([]byte(`{"kind":"PodList","items":[{"metadata":{"name":"p"},"spec":{"containers":[{"resources":{"requests":{"cpu":"1e1000000000"}}}]}}]}`), false)
	f.Add([]byte("k8s\x00\x0a\x15\x0a\x02v1\x12\x11ResourceQuotaList\x12\x00"), true)
	f.Add([]byte("k8s\x00\x0a\x0b\x0a\x02v1\x12\x07PodList\x12\x00"), true)
	f.Fuzz(func(t *testing.T, body []byte, protobuf bool) {
		start := time.Now()
		if _, err := decodePodCount(body, protobuf); err != nil && len(err.Error()) > 4<<10+len(body)*4 {
			t.Fatalf("pod list error of %d bytes", len(err.Error()))
		}
		if _, err := decodePodMeta(body, protobuf); err != nil && len(err.Error()) > 4<<10+len(body)*4 {
			t.Fatalf("dry-run answer error of %d bytes", len(err.Error()))
		}
		qs, err := decodeQuotaList(body, protobuf)
		if err != nil {
			return
		}
		for _, q := range qs {
			for _, m := range []map[string]string{q.SpecHard, q.StatusHard, q.Used} {
				for _, v := range m {
					if qv, err := parseQuantity(v); err == nil && len(qv.Text) > 4<<10+64 {
						t.Fatalf("quantity text of %d bytes kept", len(qv.Text))
					}
				}
			}
		}
		// Linear work: far below a second for what a fuzzer sends, where
		// resource.ParseQuantity on "1e-1000000000" never returns.
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("decoding %d bytes took %v", len(body), d)
		}
	})
}
