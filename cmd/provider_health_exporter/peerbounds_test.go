package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	encbin "encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// scrapeAll asks for /metrics with a long scrape timeout and returns the
// exposition, failing when it does not come within it.
func scrapeAll(t *testing.T, addr string, logs fmt.Stringer) string {
	t.Helper()
	// A guard far beyond any honest check, not a measure of speed.
	const header = 2 * time.Minute
	client := &http.Client{Timeout: header}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.Itoa(int(header.Seconds())))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("/metrics: no answer within the scrape timeout: %v\nlog:\n%.4000s", err, logs.String())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	return string(b)
}

// targetReasonIs tells whether target of entry name has reason at 1.
func targetReasonIs(metrics, name, target, reason string) bool {
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "provider_health_reason{") && strings.Contains(line, `name="`+name+`"`) &&
			strings.Contains(line, `target="`+target+`"`) && strings.Contains(line, `reason="`+reason+`"`) {
			return strings.HasSuffix(strings.TrimSpace(line), " 1")
		}
	}
	return false
}

// TestHugeHeadersBinary runs the real binary against a Kubernetes API
// server, a Compute and a token endpoint that answer with 9 MB of headers
// (net/http's default limit is 10 MB, which each would have been read
// into), beside a healthy cluster and project, three scrapes in a row. The
// process, run as a replica of up to 100 hosts is (a 128 MiB memory
// limit, handed to it in PROVIDER_HEALTH_MEMORY_LIMIT; docs/scaling.md:
// "Sizing"), stays up with its peak RSS (VmHWM) under that limit, /metrics answers within its scrape timeout, the hostile entries
// read BadResponse (CredentialsUnavailable for the token) naming the
// 64 KiB limit, and the healthy ones stay Ready (docs/security.md: "What
// the exporter bounds").
func TestHugeHeadersBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	value := strings.Repeat("h", 8<<10)
	huge := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for i := range 1100 {
				w.Header().Set(fmt.Sprintf("X-Padding-%d", i), value)
			}
			h(w, r)
		}
	}
	token := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"test-token","expires_in":3599,"token_type":"Bearer"}`)
	}
	instances := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"compute#instanceAggregatedList","items":{}}`)
	}
	pods := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
	}
	serve := func(h http.HandlerFunc, tls bool) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		if tls {
			srv.EnableHTTP2 = true
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		return srv
	}
	goodTokens, hugeTokens := serve(token, false), serve(huge(token), false)
	goodCompute, hugeCompute := serve(instances, false), serve(huge(instances), false)
	goodAPI, hugeAPI := serve(pods, true), serve(huge(pods), true)

	goodCreds, hugeTokenCreds := filepath.Join(dir, "good.json"), filepath.Join(dir, "huge-token.json")
	writeFile(t, goodCreds, serviceAccountJSON(t, goodTokens.URL+"/token"))
	writeFile(t, hugeTokenCreds, serviceAccountJSON(t, hugeTokens.URL+"/token"))
	kubeconfig := func(name string, srv *httptest.Server) string {
		ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
		p := filepath.Join(dir, name)
		writeFile(t, p, "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: "+srv.URL+
			"\n    certificate-authority-data: "+ca+"\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user:\n    token: t\n")
		return p
	}
	gcp := func(name, endpoint, creds string) string {
		return fmt.Sprintf("  - name: %s\n    project: crawl-prod-123\n    credentials_file: %s\n    endpoint: %s\n    timeout: 2m\n", name, creds, endpoint)
	}
	kube := func(name, kubeconfig string) string {
		return fmt.Sprintf("  - name: %s\n    kubeconfig: %s\n    timeout: 2m\n", name, kubeconfig)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "gcp:\n"+gcp("gcp-good", goodCompute.URL, goodCreds)+gcp("gcp-huge", hugeCompute.URL, goodCreds)+
		gcp("gcp-huge-token", goodCompute.URL, hugeTokenCreds)+
		"kubernetes:\n"+kube("kube-good", kubeconfig("good-kubeconfig", goodAPI))+kube("kube-huge", kubeconfig("huge-kubeconfig", hugeAPI)))

	var logs syncBuffer
	cmd, _, addr := startExporterEnv(t, dir, &logs, []string{"PROVIDER_HEALTH_MEMORY_LIMIT=134217728"}, "--config.file="+cfgPath)
	startPeak := peakResidentBytes(t, cmd.Process.Pid)
	var metrics string
	for range 3 {
		metrics = scrapeAll(t, addr, &logs)
	}
	peak := peakResidentBytes(t, cmd.Process.Pid)
	t.Logf("exporter peak RSS (VmHWM) after 3 scrapes of 3 answers with 9 MB of headers each: %d MiB (%d MiB at start)", peak>>20, startPeak>>20)
	if peak > 128<<20 {
		t.Errorf("peak RSS %d MiB, over the 128 MiB limit of a replica of up to 100 hosts", peak>>20)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the exporter is gone: %v", err)
	}
	for name, reason := range map[string]string{
		"gcp-good": "Ready", "gcp-huge": "BadResponse", "gcp-huge-token": "CredentialsUnavailable",
		"kube-good": "Ready", "kube-huge": "BadResponse",
	} {
		if !reasonIs(metrics, name, reason) {
			t.Errorf("%s: want reason %s", name, reason)
		}
	}
	if n := strings.Count(logs.String(), "limit of 64 KiB"); n == 0 {
		t.Errorf("no log line names the header limit; log:\n%.4000s", logs.String())
	}
}

// libvirtPeer answers a libvirt channel the way libvirtd answers the calls
// a check makes (a running pool), and, for a flooding peer, pushes data
// nobody asked for once it has answered a pool info: the fault of a
// hostile host that a real libvirtd cannot be made to show.
func libvirtPeer(ch ssh.Channel, flood bool) {
	defer ch.Close()
	for {
		var hb [28]byte
		if _, err := io.ReadFull(ch, hb[:]); err != nil {
			return
		}
		be := encbin.BigEndian
		length, proc, serial := be.Uint32(hb[0:]), be.Uint32(hb[12:]), be.Uint32(hb[20:])
		if length < 28 || length > 1<<16 {
			return
		}
		body := make([]byte, length-28)
		if _, err := io.ReadFull(ch, body); err != nil {
			return
		}
		var p []byte
		switch proc {
		case 66: // auth list: one type, none
			p = be.AppendUint32(be.AppendUint32(p, 1), 0)
		case 157: // lib version
			p = be.AppendUint64(p, 9000000)
		case 84: // pool lookup: the name asked for, a UUID
			n := be.Uint32(body)
			p = append(p, body[:4+n+(4-n%4)%4]...)
			p = append(p, make([]byte, 16)...)
		case 87: // pool info: running, 100 GiB, 30 used, 70 available
			p = be.AppendUint32(p, 2)
			p = be.AppendUint64(be.AppendUint64(be.AppendUint64(p, 100<<30), 30<<30), 70<<30)
		}
		frame := be.AppendUint32(nil, uint32(28+len(p)))
		for _, v := range []uint32{0x20008086, 1, proc, 1, serial, 0} {
			frame = be.AppendUint32(frame, v)
		}
		if _, err := ch.Write(append(frame, p...)); err != nil {
			return
		}
		if proc == 87 && flood {
			break
		}
	}
	// Let the check that asked finish, then flood until cut off.
	time.Sleep(200 * time.Millisecond)
	junk := make([]byte, 32<<10)
	for {
		if _, err := ch.Write(junk); err != nil {
			return
		}
	}
}

// sshHost is an in-process SSH server on a loopback port that takes any
// key and forwards the libvirt socket's channel to libvirtPeer.
func sshHost(t *testing.T, hostKey ssh.Signer, flood bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(hostKey)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
				if err != nil {
					return
				}
				defer sc.Close()
				go ssh.DiscardRequests(reqs)
				for nc := range chans {
					if nc.ChannelType() != "direct-streamlocal@openssh.com" {
						_ = nc.Reject(ssh.UnknownChannelType, "not supported")
						continue
					}
					ch, creqs, err := nc.Accept()
					if err != nil {
						continue
					}
					go ssh.DiscardRequests(creqs)
					go libvirtPeer(ch, flood)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFloodingLibvirtPeersBinary runs the real binary against 40 KVM hosts
// whose libvirt peer, once it has answered a check, pushes data nobody
// asked for without end, beside a healthy host, over four scrapes. Before
// the libvirt channel was drained, x/crypto/ssh buffered each flooding
// channel's whole 2 MiB window: 40 such hosts took the process from 46 to
// 164 MB. Now each flood is cut at one reply's worth unread: the process
// stays up with its peak RSS (VmHWM) under 128 MiB, the memory limit of a
// replica of up to 100 hosts, handed to it as that replica's is
// (PROVIDER_HEALTH_MEMORY_LIMIT; docs/scaling.md: "Sizing"), /metrics answers within its scrape timeout, every flooding host reads
// LibvirtConnectionLost in the scrape after its flood, and the healthy
// host stays Ready on its one connection.
func TestFloodingLibvirtPeersBinary(t *testing.T) {
	t.Parallel()
	const flooders = 40
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	_, clientKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	writeFile(t, key, string(pem.EncodeToMemory(block)))
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: %s\n    insecure_ignore_host_key: true\n    timeout: 2m\n    hosts:\n", key)
	fmt.Fprintf(&cfg, "      - {name: good, address: %q}\n", sshHost(t, hostKey, false))
	for i := range flooders {
		fmt.Fprintf(&cfg, "      - {name: flood-%02d, address: %q}\n", i, sshHost(t, hostKey, true))
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, cfg.String())

	var logs syncBuffer
	cmd, _, addr := startExporterEnv(t, dir, &logs, []string{"PROVIDER_HEALTH_MEMORY_LIMIT=134217728"}, "--config.file="+cfgPath)
	startPeak := peakResidentBytes(t, cmd.Process.Pid)
	var metrics string
	for i := range 4 {
		metrics = scrapeAll(t, addr, &logs)
		if i == 0 {
			for f := range flooders {
				if target := fmt.Sprintf("flood-%02d", f); !targetReasonIs(metrics, "lab", target, "Ready") {
					t.Fatalf("%s: want Ready at the first scrape, before its flood", target)
				}
			}
			// Each flood starts 200 ms after its check was answered; it
			// is cut before the next scrape, or met by it.
			time.Sleep(time.Second)
		}
		if i == 1 {
			for f := range flooders {
				if target := fmt.Sprintf("flood-%02d", f); !targetReasonIs(metrics, "lab", target, "LibvirtConnectionLost") {
					t.Errorf("%s: want LibvirtConnectionLost in the scrape after its flood", target)
				}
			}
		}
		if !targetReasonIs(metrics, "lab", "good", "Ready") {
			t.Errorf("scrape %d: the healthy host is not Ready", i+1)
		}
	}
	peak := peakResidentBytes(t, cmd.Process.Pid)
	t.Logf("exporter peak RSS (VmHWM) over 4 scrapes of %d flooding hosts: %d MiB (%d MiB at start)", flooders, peak>>20, startPeak>>20)
	if peak > 128<<20 {
		t.Errorf("peak RSS %d MiB, over the 128 MiB limit of a replica of up to 100 hosts", peak>>20)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the exporter is gone: %v", err)
	}
	if !strings.Contains(metrics, `provider_health_kvm_connects_total{name="lab",target="good"} 1`) {
		t.Errorf("the healthy host redialed: %s", grepLines(metrics, `target="good"`))
	}
	if !strings.Contains(logs.String(), "bytes that no call asked for") {
		t.Errorf("no log line names the flood; log:\n%.4000s", logs.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
