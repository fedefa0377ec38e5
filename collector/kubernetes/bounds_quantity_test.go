package kubernetes

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// slowQuantity keeps resource.ParseQuantity busy for minutes: a test that
// lets one through is stopped by the test binary's timeout, never passes.
const slowQuantity = "1e-1000000000"

// bare writes text where item has the quantity placeholder, as a bare
// JSON number: "cpu": 1e-1000000000.
func bare(item []byte, text string) []byte {
	return bytes.ReplaceAll(item, []byte(strconv.Quote(placeholder)), []byte(text))
}

// TestQuantityCheckEveryWriting: every way JSON and protobuf can write a
// quantity that the generated decoders parse is checked before they do:
// a string, a bare number (with an exponent, or a mantissa of any
// length), a key given twice (encoding/json and sigs.k8s.io/json parse
// each occurrence), a map entry of two values and a Quantity of two texts
// (the protobuf decoder parses each), an element of a list after a good
// one. The error names the field.
func TestQuantityCheckEveryWriting(t *testing.T) {
	t.Parallel()
	n := fitNode("n", nil, "cpu", placeholder, "pods", "110")
	n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	jsonNode := wire{}.item(t, n)
	for _, tc := range []struct {
		name, want string
		raw        []byte
	}{
		{"string", `status.allocatable[cpu]: quantity "1e-1000000000"`, wire{}.withQuantity(jsonNode, slowQuantity, "")},
		{"bare number", `status.allocatable[cpu]: quantity "1e2147483647"`, bare(jsonNode, "1e2147483647")},
		{"bare number, negative exponent", `status.allocatable[cpu]: quantity "1e-1000000000"`, bare(jsonNode, slowQuantity)},
		{"bare number, signed exponent", `status.allocatable[cpu]: quantity "-1E+2147483647"`, bare(jsonNode, "-1E+2147483647")},
		{"bare number, long mantissa", `status.allocatable[cpu]: quantity "11111111111111111111111111111111…": 100000 characters`, bare(jsonNode, strings.Repeat("1", 100_000))},
		{"a key given twice", `status.allocatable[cpu]: quantity "1e-1000000000"`,
			bytes.Replace(jsonNode, []byte(`"cpu":"7777m"`), []byte(`"cpu":"1e-1000000000","cpu":"7777m"`), 1)},
		{"a field given twice", `status.allocatable[cpu]: quantity "1e-1000000000"`,
			bytes.Replace(jsonNode, []byte(`"status":{`), []byte(`"status":{"allocatable":{"cpu":"1e-1000000000"}},"status":{`), 1)},
	} {
		if !bytes.Contains(tc.raw, []byte("1")) || bytes.Equal(tc.raw, jsonNode) {
			t.Fatalf("%s: the input was not changed", tc.name)
		}
		err := quantitySchema("Node").checkJSON(tc.raw, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("JSON, %s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}

	// A Pod's second container, after a good one: the error of a list's
	// element is the list's.
	p := fitPod(func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(placeholder)}}})
	}, "cpu", "1")
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	err := quantitySchema("Pod").checkJSON(bare(wire{}.item(t, p), "1e2147483647"), "")
	if want := `spec.containers[1].resources.requests[memory]: quantity "1e2147483647"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("JSON, the second container: %v, want an error with %q", err, want)
	}

	pn := fitNode("n", nil)
	pb := wire{protobuf: true}.item(t, pn)
	entry := func(key string, values ...string) []byte {
		b := nest(entryKey, []byte(key))
		for _, v := range values {
			b = append(b, nest(entryValue, nest(quantityString, []byte(v)))...)
		}
		return nest(3, nest(2, b)) // status.allocatable
	}
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"string", append(bytes.Clone(pb), entry("cpu", slowQuantity)...)},
		{"a map entry of two values, the first refused", append(bytes.Clone(pb), entry("cpu", slowQuantity, "1")...)},
		{"a Quantity of two texts, the first refused", append(bytes.Clone(pb), nest(3, nest(2, append(nest(entryKey, []byte("cpu")),
			nest(entryValue, append(nest(quantityString, []byte(slowQuantity)), nest(quantityString, []byte("1"))...))...)))...)},
	} {
		err := quantitySchema("Node").checkProto(tc.raw, "")
		if want := `status.allocatable[cpu]: quantity "1e-1000000000"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("protobuf, %s: %v, want an error with %q", tc.name, err, want)
		}
	}
	if err := quantitySchema("Node").checkProto(append(bytes.Clone(pb), entry("cpu", "1", "2")...), ""); err != nil {
		t.Errorf("protobuf, a map entry of two good values: %v", err)
	}
	if err := quantitySchema("Node").checkJSON(bare(jsonNode, "4"), ""); err != nil {
		t.Errorf("JSON, a bare 4: %v", err)
	}
}

// TestDecodeWholePodQuantitiesBounded: the dry run's answer decoded whole
// for schedule is checked as the watches' objects are: a quantity no
// cluster could mean, however written and wherever in the Pod (an
// emptyDir's size limit, which the quota needs do not read), is a bad
// response naming the field; a key in another case ("SPEC"), which
// client-go's decoder ignores, is ignored too, never parsed.
func TestDecodeWholePodQuantitiesBounded(t *testing.T) {
	t.Parallel()
	p := fitPod(func(p *corev1.Pod) {
		lim := resource.MustParse(placeholder)
		p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &lim}}}}
	}, "cpu", "1")
	p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	for _, w := range []wire{{}, {protobuf: true}} {
		item := w.item(t, p)
		var body []byte
		if w.protobuf {
			// Pod.spec (2) .volumes (1) .volumeSource (2) .emptyDir (2) .sizeLimit (2), a second occurrence merged.
			body = w.object("Pod", append(bytes.Clone(item), nest(2, nest(1, nest(2, nest(2, nest(2, nest(quantityString, []byte(slowQuantity)))))))...))
		} else {
			body = bare(item, slowQuantity)
		}
		_, err := decodeWholePod(body, w.protobuf)
		var bad *badResponseError
		want := `the dry run's Pod: spec.volumes[0].emptyDir.sizeLimit: quantity "1e-1000000000": magnitude beyond 10^±64`
		if w.protobuf {
			want = strings.ReplaceAll(want, "volumes[0]", "volumes")
		}
		if !errors.As(err, &bad) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a bad response with %q", w.name(), err, want)
		}
	}
	body := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"SPEC":{"containers":[{"name":"c","resources":{"requests":{"cpu":` + slowQuantity + `}}}]}}`)
	pod, err := decodeWholePod(body, false)
	if err != nil || len(pod.Spec.Containers) != 0 {
		t.Errorf("a Pod with SPEC: %v, %+v; want it read without its SPEC", err, pod)
	}
}

// TestWatchBareNumberQuantities: through the watch path, a Node whose
// allocatable cpu is the bare number 1e-1000000000 and a Pod whose memory
// request is the bare number 1e2147483647 ("memory": 1e2147483647, no
// quotes) are stubs whose message names the field, as string quantities
// are; with the check skipping numbers, resource.ParseQuantity grinds for
// minutes and the test binary's timeout ends the test.
func TestWatchBareNumberQuantities(t *testing.T) {
	w := wire{}
	h := newHostileAPI(t, w)
	node := func(name string, mut func(*corev1.Node)) []byte {
		n := fitNode(name, mut)
		n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		n.ResourceVersion = "5"
		return w.item(t, n)
	}
	h.items["nodes"] = [][]byte{
		node("good", nil),
		bare(node("bad", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(placeholder) }), slowQuantity),
		node("full", nil),
	}
	hog := boundPod("full", "memory", placeholder)
	hog.Name, hog.ResourceVersion = "hog", "6"
	hog.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	small := boundPod("good", "cpu", "1")
	small.Name, small.ResourceVersion = "small", "6"
	small.TypeMeta = hog.TypeMeta
	h.items["pods"] = [][]byte{w.item(t, small), bare(w.item(t, hog), "1e2147483647")}
	fitsGoodNodeOnly(t, h, false)
}

// TestBoundedDecoderListBrokenItem: a list whose second item does not
// decode (its metadata a number, an item that is not an object, a
// protobuf item cut short) is a bad response naming the item, at once:
// never a list without it, nor a decoder that waits.
func TestBoundedDecoderListBrokenItem(t *testing.T) {
	t.Parallel()
	for _, w := range []wire{{}, {protobuf: true}} {
		var dec runtime.Decoder
		for _, info := range (boundedCodecs{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), kind: "Node"}).SupportedMediaTypes() {
			if info.MediaType == w.contentType() {
				dec = info.Serializer
			}
		}
		good := fitNode("good", nil)
		good.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		brokens := [][]byte{[]byte(`{"kind":"Node","metadata":5}`), []byte(`5`), []byte(`"x"`)}
		if w.protobuf {
			// A metadata field whose length runs past the item.
			brokens = [][]byte{protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 100), {0xff, 0xff, 0xff}}
		}
		for _, broken := range brokens {
			var list corev1.NodeList
			_, _, err := dec.Decode(w.list("NodeList", [][]byte{w.item(t, good), broken}), nil, &list)
			var bad *badResponseError
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), "the list of nodes: item 1: ") {
				t.Errorf("%s, item %q: %v (%d items), want a bad response naming item 1", w.name(), broken, err, len(list.Items))
			}
		}
	}
}
