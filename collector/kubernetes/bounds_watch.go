package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// What the schedule watches read is bounded before client-go decodes it
// (docs/security.md: "Strings, labels and pages"):
//
//   - every event's frame, JSON or protobuf, is at most maxWatchEvent
//     bytes: a longer one ends the watch with an error saying so, and
//     the informer lists and watches again after its backoff. client-go's
//     JSON framing would first read a whole object into memory, however
//     large (its protobuf framing stops at 16 MiB, and then reads the rest
//     to skip it);
//   - every quantity of a Node or a Pod (allocatable, capacity, requests,
//     limits, overhead, an emptyDir's size limit: every field of type
//     resource.Quantity) is checked by internal/quantity before
//     resource.ParseQuantity sees it, in JSON and in protobuf, where the
//     generated decoder parses each quantity as it meets it. An object with
//     one that no cluster could mean ("1e-1000000000" keeps ParseQuantity
//     busy for minutes) is stored as a stub that names it
//     (unreadableAnnotation): the fit counts such a Node, or the node of
//     such a Pod, as taking no copy, with the cause in its message;
//   - an answer of another kind (a ConfigMapList for the Nodes) ends the
//     list or watch as a bad response naming what came back.
//
// The watch of namespaces (namespaces.go) is read with the same framing
// and kind checks; a Namespace has no quantity.

// maxWatchEvent bounds one event of a watch, or one object of a list: the
// API server stores objects of at most 1.5 MiB in etcd; 16 MiB is also
// client-go's own bound for a protobuf frame.
const maxWatchEvent = 16 << 20

// unreadableAnnotation marks the stub of a Node or Pod with a quantity
// that cannot be read; its value says which and why. The stub keeps the
// object's name, labels, node and phase, never its quantities.
const unreadableAnnotation = "provider-health-exporter.internal/unreadable-quantity"

// errEventTooLarge is the error of a watch event over maxWatchEvent.
var errEventTooLarge = fmt.Errorf("an event of the watch is over the limit of %d MiB (the API server stores objects of at most 1.5 MiB)", maxWatchEvent>>20)

// boundedCodecs is the serializer of a watch of kind ("Node", "Pod"): only
// JSON and protobuf (a CBOR or YAML answer is refused), with bounded
// framing and a decoder that checks quantities and kinds first.
type boundedCodecs struct {
	runtime.NegotiatedSerializer
	kind string
}

func (b boundedCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, info := range b.NegotiatedSerializer.SupportedMediaTypes() {
		var protobuf bool
		switch info.MediaType {
		case runtime.ContentTypeJSON:
		case runtime.ContentTypeProtobuf:
			protobuf = true
		default:
			continue
		}
		info.Serializer = &boundedDecoder{Serializer: info.Serializer, protobuf: protobuf, kind: b.kind}
		info.PrettySerializer, info.StrictSerializer = nil, nil
		if info.StreamSerializer != nil {
			s := *info.StreamSerializer
			s.Framer = boundedFramer{Framer: s.Framer, protobuf: protobuf, limit: maxWatchEvent}
			info.StreamSerializer = &s
		}
		out = append(out, info)
	}
	return out
}

// boundedDecoder decodes the objects of a watch of kind, and the lists of
// its list calls, checking each object's quantities before the
// generated decoders parse them.
type boundedDecoder struct {
	runtime.Serializer
	protobuf bool
	kind     string
}

func (d *boundedDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	kind, raw, err := d.envelope(data)
	if err != nil {
		return nil, nil, &badResponseError{err: err}
	}
	if kind == "Status" {
		// An error's status, in an answer or a watch's ERROR event: no
		// quantity in it.
		return d.Serializer.Decode(data, defaults, into)
	}
	want := d.kind
	list := false
	switch into.(type) {
	case *corev1.NodeList, *corev1.PodList, *corev1.NamespaceList:
		want, list = d.kind+"List", true
	}
	if kind != want {
		what := "an event of the watch"
		if list {
			what = "the list"
		}
		return nil, nil, &badResponseError{err: fmt.Errorf("%s of %ss is a %q, want a %s", what, strings.ToLower(d.kind), boundedText(kind), want)}
	}
	gvk := corev1.SchemeGroupVersion.WithKind(kind)
	if list {
		if err := d.decodeList(raw, into); err != nil {
			return nil, nil, &badResponseError{err: fmt.Errorf("the list of %ss: %w", strings.ToLower(d.kind), err)}
		}
		return into, &gvk, nil
	}
	obj, err := d.decodeItem(raw)
	if err != nil {
		return nil, nil, &badResponseError{err: fmt.Errorf("an event of the watch of %ss: %w", strings.ToLower(d.kind), err)}
	}
	return obj, &gvk, nil
}

// envelope reads an answer's kind, and the object itself: for protobuf,
// the bytes inside its runtime.Unknown envelope.
func (d *boundedDecoder) envelope(data []byte) (kind string, raw []byte, err error) {
	if d.protobuf {
		return unwrap(data)
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(data, &tm); err != nil {
		return "", nil, fmt.Errorf("JSON answer: %w", err)
	}
	return tm.Kind, data, nil
}

// decodeList decodes a NodeList or PodList item by item, so that one item
// with a quantity that cannot be read becomes a stub and the others are
// read.
func (d *boundedDecoder) decodeList(raw []byte, into runtime.Object) error {
	var meta metav1.ListMeta
	var items [][]byte
	if d.protobuf {
		// NodeList and PodList: field 1 the list's metadata, 2 the items.
		err := fields(raw, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				return meta.Unmarshal(v)
			case listItems:
				items = append(items, v)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("protobuf: %w", err)
		}
	} else {
		var l struct {
			Metadata metav1.ListMeta   `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &l); err != nil {
			return err
		}
		meta = l.Metadata
		for _, it := range l.Items {
			items = append(items, it)
		}
	}
	switch l := into.(type) {
	case *corev1.NodeList:
		l.ListMeta, l.Items = meta, make([]corev1.Node, 0, len(items))
		for i, it := range items {
			obj, err := d.decodeItem(it)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			l.Items = append(l.Items, *obj.(*corev1.Node))
		}
	case *corev1.PodList:
		l.ListMeta, l.Items = meta, make([]corev1.Pod, 0, len(items))
		for i, it := range items {
			obj, err := d.decodeItem(it)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			l.Items = append(l.Items, *obj.(*corev1.Pod))
		}
	case *corev1.NamespaceList:
		l.ListMeta, l.Items = meta, make([]corev1.Namespace, 0, len(items))
		for i, it := range items {
			obj, err := d.decodeItem(it)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			l.Items = append(l.Items, *obj.(*corev1.Namespace))
		}
	}
	return nil
}

// decodeItem decodes one Node or Pod (raw: its JSON, or its protobuf
// message without envelope), or its stub when one of its quantities
// cannot be read.
func (d *boundedDecoder) decodeItem(raw []byte) (runtime.Object, error) {
	var obj interface {
		runtime.Object
		metav1.Object
	}
	var bad error
	switch d.kind {
	case "Namespace":
		// No quantity in a Namespace.
		obj = &corev1.Namespace{}
	default:
		sch := quantitySchema(d.kind)
		if d.protobuf {
			bad = sch.checkProto(raw, "")
		} else {
			bad = sch.checkJSON(raw, "")
		}
		if d.kind == "Node" {
			obj = &corev1.Node{}
		} else {
			obj = &corev1.Pod{}
		}
	}
	if bad != nil {
		return stub(obj, raw, d.protobuf, bad)
	}
	if d.protobuf {
		u, ok := obj.(interface{ Unmarshal([]byte) error })
		if !ok {
			return nil, errors.New("no protobuf decoder")
		}
		if err := u.Unmarshal(raw); err != nil {
			return nil, fmt.Errorf("protobuf: %w", err)
		}
	} else if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return obj, nil
}

// The protobuf field numbers a stub reads (k8s.io/api/core/v1's
// generated.proto; TestStubFieldNumbers checks them against the Go
// types' tags).
const (
	objectMetadata = 1  // Node.metadata, Pod.metadata
	podSpecField   = 2  // Pod.spec
	podStatusField = 3  // Pod.status
	specNodeName   = 10 // PodSpec.nodeName
	statusPhase    = 1  // PodStatus.phase
)

// stub fills obj with what the fit needs of an object whose quantity
// cannot be read: its metadata, and a Pod's node and phase, with the cause
// in unreadableAnnotation. No quantity of it is parsed.
func stub(obj metav1.Object, raw []byte, protobuf bool, cause error) (runtime.Object, error) {
	var meta metav1.ObjectMeta
	var nodeName string
	var phase corev1.PodPhase
	if protobuf {
		err := fields(raw, func(num protowire.Number, v []byte) error {
			switch num {
			case objectMetadata:
				return meta.Unmarshal(v)
			case podSpecField:
				return fields(v, func(num protowire.Number, v []byte) error {
					if num == specNodeName {
						nodeName = string(v)
					}
					return nil
				})
			case podStatusField:
				return fields(v, func(num protowire.Number, v []byte) error {
					if num == statusPhase {
						phase = corev1.PodPhase(v)
					}
					return nil
				})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("protobuf: %w", err)
		}
	} else {
		var s struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
			Status struct {
				Phase corev1.PodPhase `json:"phase"`
			} `json:"status"`
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &s); err != nil {
			return nil, err
		}
		meta, nodeName, phase = s.Metadata, s.Spec.NodeName, s.Status.Phase
	}
	meta.Annotations = map[string]string{unreadableAnnotation: provider.BoundString(cause.Error())}
	meta.ManagedFields = nil
	switch o := obj.(type) {
	case *corev1.Node:
		o.ObjectMeta = meta
		return o, nil
	case *corev1.Pod:
		o.ObjectMeta, o.Spec.NodeName, o.Status.Phase = meta, nodeName, phase
		return o, nil
	}
	return nil, fmt.Errorf("no stub for %T", obj)
}

// qkind is what a place in an object's schema is.
type qkind int

const (
	qQuantity qkind = iota + 1
	qStruct
	qSlice
	qMap
)

// qnode is the schema of the places of a type that can hold a
// resource.Quantity; a type without any has none (nil).
type qnode struct {
	kind qkind
	// A struct's fields that can hold a quantity, by protobuf field
	// number and by JSON name (an inline struct's fields are its own in
	// JSON, a message of their own in protobuf).
	proto map[protowire.Number]qfield
	json  map[string]qfield
	// elem is a slice's element or a map's value.
	elem *qnode
}

type qfield struct {
	name string // the JSON name, for messages; "" for an inline struct
	node *qnode
}

// quantitySchema is the schema of Node or Pod. Built once from the Go
// types' tags and never changed: every field of type resource.Quantity,
// however deep, is found, including ones a later API version adds.
func quantitySchema(kind string) *qnode {
	s := schemas()
	if kind == "Node" {
		return s.node
	}
	return s.pod
}

var schemas = sync.OnceValue(func() struct{ node, pod *qnode } {
	return struct{ node, pod *qnode }{
		node: buildSchema(reflect.TypeFor[corev1.Node](), map[reflect.Type]*qnode{}),
		pod:  buildSchema(reflect.TypeFor[corev1.Pod](), map[reflect.Type]*qnode{}),
	}
})

func buildSchema(t reflect.Type, seen map[reflect.Type]*qnode) *qnode {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[resource.Quantity]() {
		return &qnode{kind: qQuantity}
	}
	if n, ok := seen[t]; ok {
		return n
	}
	switch t.Kind() {
	case reflect.Slice:
		if e := buildSchema(t.Elem(), seen); e != nil {
			return &qnode{kind: qSlice, elem: e}
		}
	case reflect.Map:
		if e := buildSchema(t.Elem(), seen); e != nil {
			return &qnode{kind: qMap, elem: e}
		}
	case reflect.Struct:
		n := &qnode{kind: qStruct, proto: map[protowire.Number]qfield{}, json: map[string]qfield{}}
		seen[t] = n // a recursive type refers to n itself
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			child := buildSchema(f.Type, seen)
			if child == nil {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" && child.kind == qStruct {
				maps.Copy(n.json, child.json)
			} else if name != "" {
				n.json[name] = qfield{name: name, node: child}
			}
			if p := strings.Split(f.Tag.Get("protobuf"), ","); len(p) > 1 {
				if num, err := strconv.Atoi(p[1]); err == nil {
					n.proto[protowire.Number(num)] = qfield{name: name, node: child}
				}
			}
		}
		if len(n.proto) == 0 && len(n.json) == 0 {
			seen[t] = nil
			return nil
		}
		return n
	}
	return nil
}

func join(path, name string) string {
	switch {
	case name == "":
		return path
	case path == "":
		return name
	}
	return path + "." + name
}

// checkProto checks every quantity of the protobuf message b (of n's
// type), reading nothing else; the first that internal/quantity refuses
// is the error, with its place.
func (n *qnode) checkProto(b []byte, path string) error {
	switch n.kind {
	case qQuantity:
		// Quantity: field 1, its text.
		return fields(b, func(num protowire.Number, v []byte) error {
			if num != quantityString {
				return nil
			}
			if err := quantity.Check(string(v)); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			return nil
		})
	case qStruct:
		return fields(b, func(num protowire.Number, v []byte) error {
			f, ok := n.proto[num]
			if !ok {
				return nil
			}
			return f.node.checkProtoField(v, join(path, f.name))
		})
	}
	return nil
}

// checkProtoField checks one occurrence of a field: a repeated field
// occurs once per element, a map once per entry.
func (n *qnode) checkProtoField(v []byte, path string) error {
	switch n.kind {
	case qSlice:
		return n.elem.checkProtoField(v, path)
	case qMap:
		// The generated decoder parses every value field of an entry,
		// not only the last: each is checked, under the entry's key
		// (which may come after its values).
		var key string
		var values [][]byte
		err := fields(v, func(num protowire.Number, v []byte) error {
			switch num {
			case entryKey:
				key = string(v)
			case entryValue:
				values = append(values, v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, value := range values {
			if err := n.elem.checkProtoField(value, path+"["+boundedText(key)+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	return n.checkProto(v, path)
}

// checkJSON is checkProto for JSON: the object is read as raw values down
// the paths that can hold a quantity only.
func (n *qnode) checkJSON(raw json.RawMessage, path string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	switch n.kind {
	case qQuantity:
		// As resource.Quantity reads JSON: a string, or a bare number
		// ("memory": 1e2147483647), whose text is the quantity's.
		text := string(raw)
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &text); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if err := quantity.Check(text); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case qStruct:
		return members(raw, path, func(k string, v json.RawMessage) error {
			if f, ok := n.json[k]; ok {
				return f.node.checkJSON(v, join(path, f.name))
			}
			return nil
		})
	case qSlice:
		var l []json.RawMessage
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for i, v := range l {
			if err := n.elem.checkJSON(v, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case qMap:
		return members(raw, path, func(k string, v json.RawMessage) error {
			return n.elem.checkJSON(v, path+"["+boundedText(k)+"]")
		})
	}
	return nil
}

// members calls f with each member of the JSON object raw, in order, a
// key given twice included: the decoder client-go uses parses every
// occurrence of a key, not only the last that a Go map would keep.
func members(raw json.RawMessage, path string, f func(string, json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("%s: not a JSON object", path)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		k, _ := t.(string) // an object's key is always a string
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

// boundedFramer frames a watch's events as client-go's framers do, but
// never reads more than limit bytes of one event.
type boundedFramer struct {
	runtime.Framer // for writing, which the client does not do
	protobuf       bool
	limit          int
}

func (f boundedFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	if f.protobuf {
		return &lengthFrames{r: r, limit: f.limit}
	}
	return &jsonFrames{r: bufio.NewReader(r), c: r, limit: f.limit}
}

// lengthFrames reads protobuf frames, each a 4-byte big-endian length and
// that many bytes. A length over the limit is an error before any of the
// frame is read.
type lengthFrames struct {
	r         io.ReadCloser
	limit     int
	remaining int
}

func (l *lengthFrames) Read(data []byte) (int, error) {
	if l.remaining == 0 {
		var hdr [4]byte
		if _, err := io.ReadFull(l.r, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if uint64(n) > uint64(l.limit) {
			return 0, fmt.Errorf("%w: %d bytes", errEventTooLarge, n)
		}
		l.remaining = int(n)
	}
	n, err := io.ReadFull(l.r, data[:min(l.remaining, len(data))])
	l.remaining -= n
	if err != nil {
		return n, err
	}
	if l.remaining > 0 {
		return n, io.ErrShortBuffer
	}
	return n, nil
}

func (l *lengthFrames) Close() error { return l.r.Close() }

// jsonFrames reads a stream of JSON objects one at a time, following its
// braces and strings: at most limit bytes of one object are read, where
// client-go's JSON framing reads an object whole before looking at its size.
type jsonFrames struct {
	r     *bufio.Reader
	c     io.Closer
	limit int

	inFrame, inString, escape bool
	depth, size               int
}

func (j *jsonFrames) Read(data []byte) (int, error) {
	n := 0
	for n < len(data) {
		c, err := j.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && j.inFrame {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		if !j.inFrame {
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '{':
				j.inFrame, j.depth, j.size = true, 0, 0
			default:
				return n, fmt.Errorf("watch stream: an event starts with %q, not a JSON object", c)
			}
		}
		data[n] = c
		n++
		j.size++
		switch {
		case j.inString:
			switch {
			case j.escape:
				j.escape = false
			case c == '\\':
				j.escape = true
			case c == '"':
				j.inString = false
			}
		case c == '"':
			j.inString = true
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			j.depth--
			if j.depth == 0 {
				j.inFrame = false
				return n, nil
			}
		}
		if j.size >= j.limit {
			return n, fmt.Errorf("%w: more than %d bytes", errEventTooLarge, j.limit)
		}
	}
	return n, io.ErrShortBuffer
}

func (j *jsonFrames) Close() error { return j.c.Close() }

// watchDecodingCause is the cause type client-go gives the ERROR event
// that ends a watch whose stream could not be decoded
// (rest.Request.newStreamWatcher's reporter).
const watchDecodingCause = "ClientWatchDecoding"

// recordWatchErrors passes on wi's events, recording the error of an
// ERROR event in w: a watch ended by a bad event, or by the server's
// error, is said by the verdict until a list or watch call succeeds again.
// A stream the client could not decode (too large, a quantity or kind
// refused by boundedDecoder) is a bad response.
func recordWatchErrors(wi watch.Interface, w *watched) watch.Interface {
	r := &recordingWatch{in: wi, w: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go r.loop()
	return r
}

// recordingWatch is watch.Filter without its flaw: its goroutine ends
// when the watch is stopped, even with an event nobody reads.
type recordingWatch struct {
	in   watch.Interface
	w    *watched
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (r *recordingWatch) ResultChan() <-chan watch.Event { return r.out }

func (r *recordingWatch) Stop() {
	r.once.Do(func() { close(r.stop) })
	r.in.Stop()
}

func (r *recordingWatch) loop() {
	defer close(r.out)
	for e := range r.in.ResultChan() {
		if e.Type == watch.Error {
			r.w.record(watchError(e.Object))
		}
		select {
		case r.out <- e:
		case <-r.stop:
			return
		}
	}
}

func watchError(obj runtime.Object) error {
	err := apierrors.FromObject(obj)
	if st, ok := obj.(*metav1.Status); ok && st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type == watchDecodingCause {
				// The decoder's own prefix once, not at each layer.
				return &badResponseError{err: errors.New(strings.ReplaceAll(c.Message, "undecodable answer: ", ""))}
			}
		}
	}
	return err
}
