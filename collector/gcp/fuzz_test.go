package gcp

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// FuzzErrorBody: whatever body and status Compute answers with, the error
// is classified into a reason of the gcp set without panicking. Seeded with
// every recorded body.
func FuzzErrorBody(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "gcp", "*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("recorded bodies: %v %v", files, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, code := range []int{400, 401, 403, 404, 429, 500, 502, 503} {
			f.Add(code, b)
		}
	}
	reasons := Reasons()
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		if code < 400 || code > 599 {
			return
		}
		res := &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}}}
		err := googleapi.CheckResponseWithBody(res, body)
		if err == nil {
			t.Fatalf("status %d gave no error", code)
		}
		reason, _ := classify(context.Background(), err)
		if !reasons.Contains(reason) {
			t.Fatalf("reason %q is not in the gcp set", reason)
		}
	})
}

// FuzzCredentialsJSON: a credentials file of any content is refused with an
// error or parsed, never a panic, and without a request.
func FuzzCredentialsJSON(f *testing.F) {
	for _, s := range []string{
		`{"type":"service_account","project_id":"p","private_key_id":"k","private_key":"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n","client_email":"a@p.iam.gserviceaccount.com","token_uri":"http://127.0.0.1:1/token"}`,
		`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`,
		`{"type":"external_account","audience":"a","subject_token_type":"t","token_url":"http://127.0.0.1:1","credential_source":{"file":"/nonexistent"}}`,
		`{"type":"impersonated_service_account","service_account_impersonation_url":"http://127.0.0.1:1","source_credentials":{"type":"authorized_user"}}`,
		`{"type":"gdch_service_account"}`, `{"type":""}`, `{}`, `[]`, `null`, `{"type":1}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := credentialsFromFile("creds.json", b, &credentials.DetectOptions{Scopes: []string{"https://www.googleapis.com/auth/compute.readonly"}, Logger: discardLogger})
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}

// FuzzRegionAnswer: whatever a regions.get answer holds, reading it never
// panics, keeps no string longer than the bound, and keeps no quota number
// that cannot be judged (NaN, ±Inf, negative). Seeded with every recorded
// region body.
func FuzzRegionAnswer(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "gcp", "regions-*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("recorded bodies: %v %v", files, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	metrics := []string{"CPUS", "INSTANCES", "IN_USE_ADDRESSES"}
	const bound = provider.MaxProviderString + 64
	f.Fuzz(func(t *testing.T, body []byte) {
		r := &computepb.Region{}
		// As the generated client decodes an answer.
		if (protojson.UnmarshalOptions{AllowPartial: true, DiscardUnknown: true}).Unmarshal(body, r) != nil {
			return
		}
		rq := regionQuota("us-central1", r, metrics)
		if len(rq.Status) > bound || len(rq.NoData) > bound || !utf8.ValidString(rq.Status) || !utf8.ValidString(rq.NoData) {
			t.Fatalf("unbounded or invalid strings: status %d bytes, no data %d bytes", len(rq.Status), len(rq.NoData))
		}
		for m, q := range rq.Quotas {
			if why := unusable(q); why != "" {
				t.Fatalf("quota %s kept with %s", m, why)
			}
		}
		for _, why := range rq.Unusable {
			if len(why) > bound {
				t.Fatalf("unusable message of %d bytes", len(why))
			}
		}
		evaluateQuotas([]RegionQuota{rq}, map[string]float64{"CPUS": 1, "INSTANCES": 1, "IN_USE_ADDRESSES": 1})
		downRegions([]RegionQuota{rq})
	})
}
