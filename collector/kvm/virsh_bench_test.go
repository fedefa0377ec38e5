//go:build integration

package kvm_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// virshSSHURIEnv names the qemu+ssh URI through which virsh reaches the
// same sshd and libvirtd as the checker; testdata/bench/virsh.sh sets it.
const virshSSHURIEnv = "KVM_IT_VIRSH_SSH_URI"

var poolRunning = regexp.MustCompile(`(?m)^State:\s+running\s*$`)

// BenchmarkVirsh puts one host's steady check next to what a script that
// asks virsh pays for the same answer (docs/scaling.md: "Performance", "Against
// virsh"), both against the real sshd and libvirtd of testdata/kvm/ctl.sh:
//
//   - kept: the kvm Checker's check on its kept SSH + libvirt connection,
//     the two pool RPCs and nothing else. The first check dials and is not
//     measured.
//   - virsh: one whole `virsh pool-info` run per op: a new ssh process,
//     TCP, SSH handshake, a remote command starting libvirt's
//     virt-ssh-helper, libvirt's connect and the pool RPCs.
//
// The virsh sub-benchmark reports ratio-vs-kept: its ns/op divided by the
// mean ns/op of the kept runs of the same go test run.
func BenchmarkVirsh(b *testing.B) {
	e := loadEnv(b)
	uri := os.Getenv(virshSSHURIEnv)
	if uri == "" {
		b.Fatalf("%s is not set: run this benchmark with testdata/bench/virsh.sh (make bench)", virshSSHURIEnv)
	}
	u, err := url.Parse(uri)
	if err != nil || u.User.Username() == "" {
		b.Fatalf("%s=%q: want qemu+ssh://USER@HOST:PORT/...: %v", virshSSHURIEnv, uri, err)
	}
	virshUser := u.User.Username()
	var kept []float64 // ns/op of each kept run (-count)

	b.Run("kept", func(b *testing.B) {
		logger := slog.New(slog.DiscardHandler)
		c, err := kvm.New(e.config(nil), logger)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		check := func() provider.Verdict {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			v := c.Check(ctx, logger, target)
			if v.Reason != provider.ReasonReady {
				b.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
			}
			return v
		}
		check() // dials
		logins := acceptedLogins(b, e, e.user)
		for b.Loop() {
			if n := factsOf(b, check()).Connects; n != 1 {
				b.Fatalf("a steady check redialed: %d connects, want 1", n)
			}
		}
		// sshd's own count, in case the checker's facts were wrong.
		if got := acceptedLogins(b, e, e.user) - logins; got != 0 {
			b.Fatalf("sshd accepted %d logins during %d steady checks, want 0", got, b.N)
		}
		kept = append(kept, float64(b.Elapsed().Nanoseconds())/float64(b.N))
	})

	b.Run("virsh", func(b *testing.B) {
		virsh := func() {
			out, err := exec.Command("virsh", "-q", "-c", uri, "pool-info", e.pool).CombinedOutput()
			if err != nil {
				b.Fatalf("virsh -c %s pool-info %s: %v\n%s", uri, e.pool, err, out)
			}
			if !poolRunning.Match(out) {
				b.Fatalf("virsh pool-info %s: pool not running:\n%s", e.pool, out)
			}
		}
		virsh() // fails early, untimed, when the URI does not work
		logins := acceptedLogins(b, e, virshUser)
		for b.Loop() {
			virsh()
		}
		// What this measures is one SSH login per run: an ssh
		// ControlMaster reusing a connection would hide it.
		if got := acceptedLogins(b, e, virshUser) - logins; got != b.N {
			b.Fatalf("sshd accepted %d logins for %d virsh runs, want one each", got, b.N)
		}
		if len(kept) == 0 {
			return // -bench selected virsh alone
		}
		var sum float64
		for _, ns := range kept {
			sum += ns
		}
		virshNs := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(virshNs/(sum/float64(len(kept))), "ratio-vs-kept")
	})
}
