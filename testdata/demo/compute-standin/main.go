// Command compute-standin is the loopback stand-in of Google's Compute API
// that `make demo` runs (docs/configuration.md: "Demo"): it is not Google,
// it answers the requests the exporter's gcp check makes with the bodies
// recorded from the real API under testdata/gcp/, and it is the token
// endpoint of the service-account file it writes. Nothing it serves is
// live; it lets a machine without a Google project see a gcp entry Ready,
// APIDisabled and QuotaExhausted.
//
//	go run ./testdata/demo/compute-standin -bodies testdata/gcp -credentials sa.json -addr-file addr \
//	    -disabled standin-disabled -exhausted europe-west4
//
// Every project answers the aggregated instance list with
// aggregated-instances.json, except those of -disabled, whose Compute API
// answers error-403-service-disabled.json; the pages of 500 that count the
// proxies per region (an entry with two regions or more) are
// aggregated-proxies-page1.json, then, at its nextPageToken,
// aggregated-proxies-page2.json. regions.get answers
// regions-exhausted.json for the regions of -exhausted (IN_USE_ADDRESSES
// used up) and regions-ok.json for the others. Anything else is the
// recorded 404.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// accessToken is what the token endpoint hands out; the Compute paths
// accept no other, as Google accepts no request without one.
const accessToken = "ya29.demo-standin-token"

// recordedProject is the project the bodies under testdata/gcp were
// recorded for; it is replaced by the project asked for.
const recordedProject = "crawl-prod-123"

var (
	instancesPath = regexp.MustCompile(`^/compute/v1/projects/([a-z][-a-z0-9]{4,28}[a-z0-9])/aggregated/instances$`)
	regionPath    = regexp.MustCompile(`^/compute/v1/projects/([a-z][-a-z0-9]{4,28}[a-z0-9])/regions/([a-z0-9-]{1,63})$`)
)

func main() {
	if err := run(); err != nil {
		log.Fatalf("compute-standin: %v", err)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to listen on")
	bodies := flag.String("bodies", "testdata/gcp", "directory of the recorded bodies")
	credentials := flag.String("credentials", "", "write a service-account file whose token endpoint is this stand-in here")
	addrFile := flag.String("addr-file", "", "write the URL the stand-in serves on here, once it listens")
	disabled := flag.String("disabled", "", "comma-separated projects whose Compute API is disabled")
	exhausted := flag.String("exhausted", "", "comma-separated regions whose quota is used up")
	flag.Parse()

	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %q: want a loopback address and port: the stand-in serves this machine only", *listen)
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(*bodies, name))
		if err != nil {
			return nil, fmt.Errorf("recorded body: %w", err)
		}
		return b, nil
	}
	files := map[string][]byte{}
	for _, name := range []string{"aggregated-instances.json", "aggregated-proxies-page1.json", "aggregated-proxies-page2.json", "error-403-service-disabled.json", "regions-ok.json", "regions-exhausted.json", "error-404-not-found.json"} {
		if files[name], err = read(name); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	url := "http://" + l.Addr().String()
	if *credentials != "" {
		if err := writeServiceAccount(*credentials, url+"/token"); err != nil {
			return err
		}
	}
	s := &standin{files: files, disabled: split(*disabled), exhausted: split(*exhausted)}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(url+"\n"), 0o644); err != nil {
			return fmt.Errorf("address file: %w", err)
		}
	}
	log.Printf("compute-standin: a stand-in of the Compute API (not Google) on %s, serving the recorded bodies of %s", url, *bodies)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

type standin struct {
	files               map[string][]byte
	disabled, exhausted []string
}

func (s *standin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/token" {
		// The JWT grant of a service-account key: any assertion gets the
		// one token.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, accessToken)
		return
	}
	if r.Method != http.MethodGet {
		s.answer(w, http.StatusNotFound, "error-404-not-found.json", "")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+accessToken {
		http.Error(w, `{"error":{"code":401,"message":"Request is missing required authentication credential.","status":"UNAUTHENTICATED"}}`, http.StatusUnauthorized)
		return
	}
	if m := instancesPath.FindStringSubmatch(r.URL.Path); m != nil {
		if slices.Contains(s.disabled, m[1]) {
			s.answer(w, http.StatusForbidden, "error-403-service-disabled.json", m[1])
			return
		}
		switch q := r.URL.Query(); {
		case q.Get("maxResults") == "1":
			s.answer(w, http.StatusOK, "aggregated-instances.json", m[1])
		case q.Get("pageToken") == "":
			s.answer(w, http.StatusOK, "aggregated-proxies-page1.json", m[1])
		default:
			s.answer(w, http.StatusOK, "aggregated-proxies-page2.json", m[1])
		}
		return
	}
	if m := regionPath.FindStringSubmatch(r.URL.Path); m != nil {
		body := "regions-ok.json"
		if slices.Contains(s.exhausted, m[2]) {
			body = "regions-exhausted.json"
		}
		// The recorded body names its own region; the demo asks for the
		// region it names.
		s.answer(w, http.StatusOK, body, m[1])
		return
	}
	s.answer(w, http.StatusNotFound, "error-404-not-found.json", "")
}

// answer writes a recorded body with the project it was recorded for
// replaced by project.
func (s *standin) answer(w http.ResponseWriter, code int, name, project string) {
	body := s.files[name]
	if project != "" {
		body = []byte(strings.ReplaceAll(string(body), recordedProject, project))
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeServiceAccount writes a service-account key file with a fresh key
// whose token_uri is tokenURL: the exporter reads it as it reads a real
// one, and gets its token from the stand-in.
func writeServiceAccount(path, tokenURL string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	b, err := json.MarshalIndent(map[string]string{
		"type":           "service_account",
		"project_id":     "standin-demo",
		"private_key_id": "0123456789abcdef0123456789abcdef01234567",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "provider-health@standin-demo.iam.gserviceaccount.com",
		"client_id":      "100000000000000000001",
		"token_uri":      tokenURL,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("service-account file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("service-account file: %w", err)
	}
	return nil
}
