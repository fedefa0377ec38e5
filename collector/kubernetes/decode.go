package kubernetes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"
)

// The list call and the quota list are decoded here rather than by
// client-go's scheme, which decodes every resource.Quantity of the answer
// with resource.ParseQuantity: exact, and so unbounded ("1e-1000000000"
// never finishes), and "1e1000000000" parses but hard − used on it never
// finishes (docs/security.md: "Strings, labels and pages"). The Pod list is
// read as metadata only; the quota list keeps its quantities as the text
// the server wrote, for internal/quantity. Both read what client-go
// accepts: JSON, and protobuf, which a server may send whatever was asked.

// partialListAccept asks the API server for the Pod list as metadata
// (PartialObjectMetadataList): the same list, scope, selector and limit,
// without the Pods' specs, and so without their quantities. Every API
// server since 1.15 serves it; one that does not answers a PodList, which
// is read the same way.
const partialListAccept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// protobufMagic starts every protobuf answer of the API server, before
// its runtime.Unknown envelope.
var protobufMagic = []byte("k8s\x00")

// answer is the body of a 2xx answer and whether it is protobuf.
func answer(res rest.Result) (body []byte, protobuf bool, err error) {
	if err := res.Error(); err != nil {
		return nil, false, err
	}
	body, err = res.Raw()
	if err != nil {
		return nil, false, err
	}
	var ct string
	res.ContentType(&ct)
	media, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, false, &badResponseError{err: fmt.Errorf("content type %q: %w", boundedText(ct), err)}
	}
	switch media {
	case "application/json":
		return body, false, nil
	case "application/vnd.kubernetes.protobuf":
		return body, true, nil
	}
	return nil, false, &badResponseError{err: fmt.Errorf("content type %q, want application/json", boundedText(media))}
}

// unwrap opens a protobuf answer's envelope: its kind and the object.
func unwrap(body []byte) (kind string, raw []byte, err error) {
	if !bytes.HasPrefix(body, protobufMagic) {
		return "", nil, errors.New("protobuf answer without the k8s envelope")
	}
	var unk runtime.Unknown
	if err := unk.Unmarshal(body[len(protobufMagic):]); err != nil {
		return "", nil, fmt.Errorf("protobuf envelope: %w", err)
	}
	return unk.Kind, unk.Raw, nil
}

// podCount reads the list call's answer as the metadata of its Pods and
// returns how many there are on the page.
func podCount(res rest.Result) (int, error) {
	body, protobuf, err := answer(res)
	if err != nil {
		return 0, err
	}
	return decodePodCount(body, protobuf)
}

// decodePodCount is podCount of a body.
func decodePodCount(body []byte, protobuf bool) (int, error) {
	if protobuf {
		kind, raw, err := unwrap(body)
		if err != nil {
			return 0, &badResponseError{err: err}
		}
		if err := podListKind(kind); err != nil {
			return 0, err
		}
		// A PodList's fields 1 and 2 (list metadata, items) and an item's
		// field 1 (its metadata) are those of PartialObjectMetadataList;
		// the rest, the spec with its quantities, is skipped unread.
		var list metav1.PartialObjectMetadataList
		if err := list.Unmarshal(raw); err != nil {
			return 0, &badResponseError{err: fmt.Errorf("protobuf %s: %w", kind, err)}
		}
		return len(list.Items), nil
	}
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, &badResponseError{err: err}
	}
	if err := podListKind(list.Kind); err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// podMeta reads an answer that is one Pod (the dry run's) as its
// metadata: the Pod the API server sends back carries the quantities
// admission set, which are not parsed.
func podMeta(res rest.Result) (metav1.ObjectMeta, error) {
	body, protobuf, err := answer(res)
	if err != nil {
		return metav1.ObjectMeta{}, err
	}
	return decodePodMeta(body, protobuf)
}

// decodePodMeta is podMeta of a body.
func decodePodMeta(body []byte, protobuf bool) (metav1.ObjectMeta, error) {
	var kind string
	var pod metav1.PartialObjectMetadata
	if protobuf {
		k, raw, err := unwrap(body)
		if err != nil {
			return metav1.ObjectMeta{}, &badResponseError{err: err}
		}
		// A Pod's field 1 is its metadata, as PartialObjectMetadata's.
		if err := pod.Unmarshal(raw); err != nil {
			return metav1.ObjectMeta{}, &badResponseError{err: fmt.Errorf("protobuf %s: %w", boundedText(k), err)}
		}
		kind = k
	} else {
		if err := json.Unmarshal(body, &pod); err != nil {
			return metav1.ObjectMeta{}, &badResponseError{err: err}
		}
		kind = pod.Kind
	}
	if kind != "Pod" {
		return metav1.ObjectMeta{}, &badResponseError{err: fmt.Errorf("got a %q, want a Pod", boundedText(kind))}
	}
	return pod.ObjectMeta, nil
}

func podListKind(kind string) error {
	if kind != "PartialObjectMetadataList" && kind != "PodList" {
		return &badResponseError{err: fmt.Errorf("got a %q, want a PodList", boundedText(kind))}
	}
	return nil
}

// rawQuota is a ResourceQuota as the answer has it: its name and its
// quantities as text.
type rawQuota struct {
	Name       string
	SpecHard   map[string]string
	StatusHard map[string]string
	Used       map[string]string
	// Scoped is set for a quota with scopes or a scopeSelector: it counts
	// only the Pods its scopes match, which the capacity does not judge.
	Scoped bool
}

// quotaList reads the quota list's answer.
func quotaList(res rest.Result) ([]rawQuota, error) {
	body, protobuf, err := answer(res)
	if err != nil {
		return nil, err
	}
	return decodeQuotaList(body, protobuf)
}

// decodeQuotaList is quotaList of a body.
func decodeQuotaList(body []byte, protobuf bool) ([]rawQuota, error) {
	if protobuf {
		kind, raw, err := unwrap(body)
		if err != nil {
			return nil, &badResponseError{err: err}
		}
		if kind != "ResourceQuotaList" {
			return nil, &badResponseError{err: fmt.Errorf("got a %q, want a ResourceQuotaList", boundedText(kind))}
		}
		qs, err := quotaListProto(raw)
		if err != nil {
			return nil, &badResponseError{err: fmt.Errorf("protobuf ResourceQuotaList: %w", err)}
		}
		return qs, nil
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Hard          map[string]jsonQuantity `json:"hard"`
				Scopes        []string                `json:"scopes"`
				ScopeSelector json.RawMessage         `json:"scopeSelector"`
			} `json:"spec"`
			Status struct {
				Hard map[string]jsonQuantity `json:"hard"`
				Used map[string]jsonQuantity `json:"used"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &badResponseError{err: err}
	}
	if list.Kind != "ResourceQuotaList" {
		return nil, &badResponseError{err: fmt.Errorf("got a %q, want a ResourceQuotaList", boundedText(list.Kind))}
	}
	out := make([]rawQuota, len(list.Items))
	for i, it := range list.Items {
		scoped := len(it.Spec.Scopes) > 0 || len(it.Spec.ScopeSelector) > 0 && string(it.Spec.ScopeSelector) != "null"
		out[i] = rawQuota{Name: it.Metadata.Name, SpecHard: texts(it.Spec.Hard), StatusHard: texts(it.Status.Hard), Used: texts(it.Status.Used), Scoped: scoped}
	}
	return out, nil
}

// jsonQuantity is a quantity in a JSON answer: a string, or a bare number
// as resource.Quantity also reads it.
type jsonQuantity string

func (q *jsonQuantity) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("quantity: %w", err)
		}
		*q = jsonQuantity(s)
		return nil
	}
	if len(b) == 0 || b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return fmt.Errorf("quantity %s is neither a string nor a number", boundedText(string(b)))
	}
	*q = jsonQuantity(b)
	return nil
}

func texts(m map[string]jsonQuantity) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// The field numbers of core/v1's generated.proto that quotaListProto reads.
const (
	listItems      = 2 // ResourceQuotaList.items
	quotaMetadata  = 1 // ResourceQuota.metadata
	quotaSpec      = 2 // ResourceQuota.spec
	quotaStatus    = 3 // ResourceQuota.status
	metadataName   = 1 // ObjectMeta.name
	specHard       = 1 // ResourceQuotaSpec.hard
	specScopes     = 2 // ResourceQuotaSpec.scopes
	specScopeSel   = 3 // ResourceQuotaSpec.scopeSelector
	statusHard     = 1 // ResourceQuotaStatus.hard
	statusUsed     = 2 // ResourceQuotaStatus.used
	entryKey       = 1 // a map entry's key
	entryValue     = 2 // a map entry's value, a Quantity
	quantityString = 1 // Quantity.string
)

// quotaListProto reads a protobuf ResourceQuotaList with its quantities as
// text: the generated decoder would parse each with resource.ParseQuantity.
func quotaListProto(b []byte) ([]rawQuota, error) {
	var out []rawQuota
	err := fields(b, func(num protowire.Number, v []byte) error {
		if num != listItems {
			return nil
		}
		q := rawQuota{}
		err := fields(v, func(num protowire.Number, v []byte) error {
			var err error
			switch num {
			case quotaMetadata:
				err = fields(v, func(num protowire.Number, v []byte) error {
					if num == metadataName {
						q.Name = string(v)
					}
					return nil
				})
			case quotaSpec:
				err = fields(v, func(num protowire.Number, v []byte) error {
					switch num {
					case specHard:
						return mapEntry(v, &q.SpecHard)
					case specScopes, specScopeSel:
						q.Scoped = true
					}
					return nil
				})
			case quotaStatus:
				err = fields(v, func(num protowire.Number, v []byte) error {
					switch num {
					case statusHard:
						return mapEntry(v, &q.StatusHard)
					case statusUsed:
						return mapEntry(v, &q.Used)
					}
					return nil
				})
			}
			return err
		})
		if err != nil {
			return err
		}
		out = append(out, q)
		return nil
	})
	return out, err
}

// mapEntry adds one map<string, Quantity> entry to *m.
func mapEntry(b []byte, m *map[string]string) error {
	var key, value string
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case entryKey:
			key = string(v)
		case entryValue:
			return fields(v, func(num protowire.Number, v []byte) error {
				if num == quantityString {
					value = string(v)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
	return nil
}

// fields calls f with each length-delimited field of the message b (the
// only kind quotaListProto reads) and skips the others.
func fields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// boundedText keeps what an answer said short in an error.
func boundedText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// decodeWholePod reads the dry run's answer as a whole Pod, for
// schedule. Its quantities are resource.Quantity's, as client-go's
// informers read every Node and Pod, and so each is checked first as the
// watches check theirs (bounds_watch.go: a string, a bare number, a
// protobuf Quantity, a key given twice): one no cluster could mean is a
// bad response naming its field, never minutes of
// resource.ParseQuantity. The answer is bounded by the body limit of
// every answer (provider.BoundedTransport).
func decodeWholePod(body []byte, protobuf bool) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	kind := ""
	if protobuf {
		k, raw, err := unwrap(body)
		if err != nil {
			return nil, &badResponseError{err: err}
		}
		if err := quantitySchema("Pod").checkProto(raw, ""); err != nil {
			return nil, &badResponseError{err: fmt.Errorf("the dry run's Pod: %w", err)}
		}
		if err := pod.Unmarshal(raw); err != nil {
			return nil, &badResponseError{err: fmt.Errorf("protobuf %s: %w", boundedText(k), err)}
		}
		kind = k
	} else {
		if err := quantitySchema("Pod").checkJSON(body, ""); err != nil {
			return nil, &badResponseError{err: fmt.Errorf("the dry run's Pod: %w", err)}
		}
		// Case-sensitive, as client-go decodes: encoding/json would
		// also read "SPEC", which the check does not follow.
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, pod); err != nil {
			return nil, &badResponseError{err: err}
		}
		kind = pod.Kind
	}
	if kind != "Pod" {
		return nil, &badResponseError{err: fmt.Errorf("got a %q, want a Pod", boundedText(kind))}
	}
	return pod, nil
}
