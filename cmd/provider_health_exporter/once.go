package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alecthomas/kingpin/v2"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The exit codes of --check.once (docs/configuration.md: "Preflight"):
// what a script in cron or CI branches on.
const (
	oncePass        = 0   // every selected target passed
	onceFailed      = 1   // a target failed --check.need or --check.survive-loss, or is not Ready
	onceUsage       = 2   // the configuration or the flags are wrong (kingpin's usage errors too)
	onceInterrupted = 130 // SIGINT or SIGTERM cancelled the checks, as a shell reports ^C
)

// onceMargin is what the run may take beyond the longest timeout of the
// selected entries: the engine answers every target by its own deadline,
// so the margin only guards against a bug there turning a preflight in
// cron into a process that never ends.
const onceMargin = 5 * time.Second

// onceFlags are the --check.* flags of the one-shot mode.
type onceFlags struct {
	run         bool
	format      string
	entries     []string
	need        int64
	surviveLoss bool
	// modifiers is true when a flag that only --check.once reads was
	// given: without --check.once that is a usage error, not a server
	// started where a script expected an answer.
	modifiers bool
}

// addOnceFlags declares the --check.* flags on app.
func addOnceFlags(app *kingpin.Application, o *onceFlags) {
	app.Flag("check.once", "Run the configured checks once, print their verdicts and exit: 0 when every target passes, 1 when one fails, 2 for a configuration or usage error. No server is started.").Default("false").BoolVar(&o.run)
	app.Flag("check.format", "Output of --check.once: table or json.").Default("table").IsSetByUser(&o.modifiers).EnumVar(&o.format, "table", "json")
	app.Flag("check.entry", "With --check.once, check only this entry (its name, or provider/name); repeatable. Default: every entry.").PlaceHolder("NAME").IsSetByUser(&o.modifiers).StringsVar(&o.entries)
	app.Flag("check.need", "With --check.once, fail a target whose known capacity is below N proxies.").Default("1").PlaceHolder("N").IsSetByUser(&o.modifiers).Int64Var(&o.need)
	app.Flag("check.survive-loss", "With --check.once, also fail a target when losing one of its failure domains would leave proxies without a place (a negative capacity after loss).").Default("false").IsSetByUser(&o.modifiers).BoolVar(&o.surviveLoss)
}

// runOnce implements --check.once: load the configuration as the server
// does, run each selected entry's checks once under its own timeout
// through the engine (as a scrape without a timeout header does), print
// the verdicts to stdout and why each failing target failed to stderr,
// close the checkers (kept SSH connections) and return the exit code.
func runOnce(kinds []provider.Kind, configFile string, o onceFlags, logger *slog.Logger, stdout, stderr io.Writer) int {
	usage := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "%s: "+format+"\n", append([]any{program}, args...)...)
		return onceUsage
	}
	if o.need < 0 {
		return usage("--check.need=%d: must not be negative", o.need)
	}
	// Signals are taken before any check can start, so that ^C always
	// cancels the checks instead of killing the process mid-check.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := config.Load(configFile, provider.Sections(kinds))
	if err != nil {
		fmt.Fprintf(stderr, "FAILED: %v\n", err)
		return onceUsage
	}
	entries, err := selectEntries(engine.Entries(kinds, cfg, logger), o.entries)
	if err != nil {
		return usage("%v", err)
	}
	if len(entries) == 0 {
		return usage("%s has no entries: nothing to check", configFile)
	}
	eng := engine.NewEngine(logger)
	if err := eng.Load(entries); err != nil {
		return usage("loading %s: %v", configFile, err)
	}
	// Close waits for the checkers' own Close (bounded by
	// provider.CloseBound): kept SSH connections end before the exit.
	defer eng.Close()

	var longest time.Duration
	for _, e := range entries {
		longest = max(longest, e.Timeout)
	}
	ctx, cancel := context.WithTimeout(sigCtx, longest+onceMargin)
	defer cancel()
	results, err := eng.Run(ctx, engine.Request{})
	interrupted := sigCtx.Err() != nil
	// A second ^C while the checkers close kills the process, as usual.
	stop()
	if err != nil {
		return usage("%v", err)
	}

	rep := newOnceReport(results, o.need, o.surviveLoss)
	var werr error
	if o.format == "json" {
		werr = writeOnceJSON(stdout, rep)
	} else {
		werr = writeOnceTable(stdout, rep)
	}
	if werr != nil {
		fmt.Fprintf(stderr, "%s: writing the verdicts: %v\n", program, werr)
	}
	for _, t := range rep.Targets {
		if !t.Pass {
			fmt.Fprintln(stderr, failureLine(t))
		}
	}
	switch {
	case interrupted:
		fmt.Fprintf(stderr, "%s: interrupted: the checks were cancelled\n", program)
		return onceInterrupted
	case werr != nil:
		return onceFailed
	case !rep.Pass:
		return onceFailed
	}
	return oncePass
}

// selectEntries keeps the entries named (by name, or provider/name), in
// configuration order; none named keeps every entry. A name that matches
// no entry is an error naming it.
func selectEntries(all []engine.Entry, names []string) ([]engine.Entry, error) {
	if len(names) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, e := range all {
			if n == e.Name || n == e.Kind+"/"+e.Name {
				want[e.Kind+"/"+e.Name], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("--check.entry=%s: no entry of that name in the configuration", provider.Echo(n))
		}
	}
	return slices.DeleteFunc(slices.Clone(all), func(e engine.Entry) bool { return !want[e.Kind+"/"+e.Name] }), nil
}

// onceReport is --check.once's answer. Its JSON field names are stable
// and documented (docs/configuration.md: "Preflight"); /api/v1/status
// names the same things alike.
type onceReport struct {
	// Pass is true when every target passed.
	Pass        bool         `json:"pass"`
	Need        int64        `json:"need"`
	SurviveLoss bool         `json:"surviveLoss"`
	Targets     []onceTarget `json:"targets"`
}

// onceTarget is one checked target.
type onceTarget struct {
	Provider string          `json:"provider"`
	Name     string          `json:"name"`
	Target   string          `json:"target"`
	Address  string          `json:"address"`
	Up       bool            `json:"up"`
	Ready    bool            `json:"ready"`
	Reason   provider.Reason `json:"reason"`
	Message  string          `json:"message"`
	// Capacity and CapacityBinding are absent when no capacity is known.
	Capacity        *int64       `json:"capacity,omitempty"`
	CapacityBinding string       `json:"capacityBinding,omitempty"`
	Domains         []onceDomain `json:"domains,omitempty"`
	DurationSeconds float64      `json:"durationSeconds"`
	Pass            bool         `json:"pass"`
	// Failures say why the target did not pass, one phrase each.
	Failures []string `json:"failures,omitempty"`
}

// onceDomain is one failure domain of a target (provider.Domain).
type onceDomain struct {
	Name     string `json:"name"`
	Capacity int64  `json:"capacity"`
	Proxies  int64  `json:"proxies"`
	// AfterLoss is absent where the target alone cannot say it (a KVM
	// host: the mixin computes it over the domain's hosts).
	AfterLoss *int64 `json:"afterLoss,omitempty"`
}

// newOnceReport judges every target of results: it passes when it is
// Ready, its capacity (where one is known) is at least need, and, with
// surviveLoss, no domain's capacity after loss is negative.
func newOnceReport(results []engine.ProviderResult, need int64, surviveLoss bool) onceReport {
	rep := onceReport{Pass: true, Need: need, SurviveLoss: surviveLoss, Targets: []onceTarget{}}
	for _, p := range results {
		for _, t := range p.Targets {
			ot := onceTarget{
				Provider: p.Kind, Name: p.Name, Target: t.Target.Name, Address: t.Target.Address,
				Up: p.Reasons.Up(t.Reason), Ready: t.Reason.Ready(), Reason: t.Reason, Message: t.Message,
				DurationSeconds: t.Duration.Seconds(),
			}
			if !ot.Ready {
				ot.Failures = append(ot.Failures, "not ready: "+string(t.Reason))
			}
			if t.Capacity.Known {
				n := t.Capacity.Proxies
				ot.Capacity, ot.CapacityBinding = &n, t.Capacity.Binding
				if n < need {
					ot.Failures = append(ot.Failures, fmt.Sprintf("capacity %d below --check.need=%d", n, need))
				}
			}
			for _, d := range t.Domains {
				od := onceDomain{Name: d.Name, Capacity: d.Capacity, Proxies: d.Proxies}
				if d.HasAfterLoss {
					a := d.AfterLoss
					od.AfterLoss = &a
					if surviveLoss && a < 0 {
						ot.Failures = append(ot.Failures, fmt.Sprintf("losing domain %s leaves %d proxies without a place", oneLine(d.Name, maxCell), -a))
					}
				}
				ot.Domains = append(ot.Domains, od)
			}
			ot.Pass = len(ot.Failures) == 0
			rep.Pass = rep.Pass && ot.Pass
			rep.Targets = append(rep.Targets, ot)
		}
	}
	return rep
}

func writeOnceJSON(w io.Writer, rep onceReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	return nil
}

// The table's bounds: a cell is cut to maxCell runes, so a line is at most
// a few hundred columns whatever the names, bindings or domains say; a
// failure line's message to maxFailureMessage.
const (
	maxCell           = 48
	maxFailureMessage = 300
)

// writeOnceTable writes rep as aligned columns, each target's domains
// under it in a table of their own.
func writeOnceTable(w io.Writer, rep onceReport) error {
	rows := [][]string{{"ENTRY", "TARGET", "REASON", "CAPACITY", "BINDING", "RESULT"}}
	for _, t := range rep.Targets {
		capacity, binding, result := "-", "-", "ok"
		if t.Capacity != nil {
			capacity = strconv.FormatInt(*t.Capacity, 10)
			if t.CapacityBinding != "" {
				binding = t.CapacityBinding
			}
		}
		if !t.Pass {
			result = "FAIL"
		}
		rows = append(rows, []string{t.Provider + "/" + t.Name, t.Target, string(t.Reason), capacity, binding, result})
	}
	widths := columnWidths(rows)
	var b strings.Builder
	writeRow(&b, "", rows[0], widths)
	for i, t := range rep.Targets {
		writeRow(&b, "", rows[i+1], widths)
		if len(t.Domains) == 0 {
			continue
		}
		drows := [][]string{{"DOMAIN", "CAPACITY", "PROXIES", "AFTER-LOSS"}}
		for _, d := range t.Domains {
			after := "-"
			if d.AfterLoss != nil {
				after = strconv.FormatInt(*d.AfterLoss, 10)
			}
			drows = append(drows, []string{d.Name, strconv.FormatInt(d.Capacity, 10), strconv.FormatInt(d.Proxies, 10), after})
		}
		dw := columnWidths(drows)
		for _, r := range drows {
			writeRow(&b, "  ", r, dw)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// columnWidths cuts every cell of rows to one line of at most maxCell
// runes, in place, and returns each column's width.
func columnWidths(rows [][]string) []int {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i := range r {
			r[i] = oneLine(r[i], maxCell)
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
	}
	return widths
}

// writeRow writes cells padded to widths, two spaces apart; the last
// cell is not padded.
func writeRow(b *strings.Builder, indent string, cells []string, widths []int) {
	b.WriteString(indent)
	for i, c := range cells {
		b.WriteString(c)
		if i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
		}
	}
	b.WriteByte('\n')
}

// failureLine is the one line stderr gets for a target that failed: the
// entry, the target, why, and the verdict's message on that one line.
func failureLine(t onceTarget) string {
	line := fmt.Sprintf("FAIL %s/%s target %s: %s", oneLine(t.Provider, maxCell), oneLine(t.Name, maxCell), oneLine(t.Target, maxCell), strings.Join(t.Failures, "; "))
	if t.Message != "" {
		line += ": " + oneLine(t.Message, maxFailureMessage)
	}
	return line
}

// oneLine is s on one line (every control character, newlines included,
// a space) and at most n runes, cut with "…": a cell or a failure line
// whatever a provider's message or a domain's name holds.
func oneLine(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	clean := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(clean) <= n {
		return clean
	}
	i, k := 0, 0
	for k < n-1 {
		_, size := utf8.DecodeRuneInString(clean[i:])
		i += size
		k++
	}
	return clean[:i] + "…"
}

// errOnceConflict is the usage error of --check.once with --config.check.
var errOnceConflict = errors.New("--check.once and --config.check exclude each other")
