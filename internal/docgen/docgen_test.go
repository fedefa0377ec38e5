package docgen

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/kinds"
	"github.com/egress-proxies/provider_health_exporter/internal/toykind"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

func TestReplace(t *testing.T) {
	const doc = "# Page\n\nhand text\n\n<!-- BEGIN GENERATED: a -->\nold a, or a hand edit\n<!-- END GENERATED: a -->\n\nmore hand text\n<!-- BEGIN GENERATED: b -->\n<!-- END GENERATED: b -->\ntail\n"
	got, probs := Replace(doc, map[string]string{"a": "new a\n", "b": "- b\n"})
	want := "# Page\n\nhand text\n\n<!-- BEGIN GENERATED: a -->\n\nnew a\n\n<!-- END GENERATED: a -->\n\nmore hand text\n<!-- BEGIN GENERATED: b -->\n\n- b\n\n<!-- END GENERATED: b -->\ntail\n"
	if got != want || len(probs) > 0 {
		t.Errorf("Replace = %q, %v; want %q", got, probs, want)
	}
	// What it wrote, it writes again: make generate twice changes nothing.
	if again, _ := Replace(got, map[string]string{"a": "new a\n", "b": "- b\n"}); again != got {
		t.Errorf("a second Replace changed the text:\n%s", again)
	}

	for _, tc := range []struct {
		name, doc string
		parts     map[string]string
		want      string
	}{
		{"no end", "<!-- BEGIN GENERATED: a -->\nx\n", map[string]string{"a": "y"}, "has no <!-- END GENERATED: a -->"},
		{"end of another", "<!-- BEGIN GENERATED: a -->\nx\n<!-- END GENERATED: b -->\n", map[string]string{"a": "y"}, "has no <!-- END GENERATED: a -->"},
		{"no markers", "text\n", map[string]string{"reasons http": "y"}, "no markers <!-- BEGIN GENERATED: reasons http --> and <!-- END GENERATED: reasons http -->"},
		{"unknown part", "<!-- BEGIN GENERATED: c -->\n<!-- END GENERATED: c -->\n", map[string]string{}, "names no part"},
		{"twice", "<!-- BEGIN GENERATED: a -->\n<!-- END GENERATED: a -->\n<!-- BEGIN GENERATED: a -->\nkept\n<!-- END GENERATED: a -->\n", map[string]string{"a": "y"}, "between markers twice"},
	} {
		got, probs := Replace(tc.doc, tc.parts)
		if !slices.ContainsFunc(probs, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: problems %q, want one with %q", tc.name, probs, tc.want)
		}
		if tc.name == "twice" && !strings.Contains(got, "kept") {
			t.Errorf("%s: the second copy was overwritten: %q", tc.name, got)
		}
	}
}

func TestRelink(t *testing.T) {
	const md = "[a](docs/configuration.md#kvm), [b](mixin/runbook.md#providernotready), [c](docs/metrics.md#reasons), [d](https://example.com/x.md), [e](#here)"
	for page, want := range map[string]string{
		"docs/metrics.md":  "[a](configuration.md#kvm), [b](../mixin/runbook.md#providernotready), [c](#reasons), [d](https://example.com/x.md), [e](#here)",
		"README.md":        "[a](docs/configuration.md#kvm), [b](mixin/runbook.md#providernotready), [c](docs/metrics.md#reasons), [d](https://example.com/x.md), [e](#here)",
		"mixin/runbook.md": "[a](../docs/configuration.md#kvm), [b](#providernotready), [c](../docs/metrics.md#reasons), [d](https://example.com/x.md), [e](#here)",
	} {
		if got := relink(md, page); got != want {
			t.Errorf("relink for %s =\n%s\nwant\n%s", page, got, want)
		}
	}
}

// tableReasons lists the reasons of the rows of the Markdown tables of
// md, and the cells of each row.
func tableReasons(md string) map[provider.Reason][][]string {
	out := map[provider.Reason][][]string{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		r := provider.Reason(strings.Trim(cells[0], "`"))
		out[r] = append(out[r], cells)
	}
	return out
}

// TestPartsListEveryReason: whatever the committed files say, what make
// generate writes lists every reason of every kind: in docs/metrics.md
// (a shared reason in the shared table with its up value and in the
// kind's line of the shared reasons it gives, a kind's own in the kind's
// table), in the kind's table of
// docs/configuration.md, exactly its set in its order, each with a
// meaning and what to do, and, Ready aside, in the runbook of the alert
// it raises, naming the kind for a kind's own reason.
func TestPartsListEveryReason(t *testing.T) {
	table, err := kinds.Table()
	if err != nil {
		t.Fatal(err)
	}
	// The toy kind too: a kind added to the table gets its rows.
	table = append(table, toykind.Kind())
	metrics := metricsParts(table)["reasons"]
	conf := configParts(table)
	actionRequired := map[provider.Reason]bool{provider.ReasonForbidden: true, "PoolMissing": true}
	runbook := runbookParts(table, actionRequired)
	metricsRows := tableReasons(metrics)
	for _, k := range table {
		if probs := k.DocProblems(); len(probs) > 0 {
			t.Errorf("kind %s: %v", k.Name(), probs)
		}
		var order []provider.Reason
		rows := tableReasons(conf["reasons "+k.Name()])
		for _, line := range strings.Split(conf["reasons "+k.Name()], "\n") {
			if strings.HasPrefix(line, "| `") {
				order = append(order, provider.Reason(strings.Trim(strings.Split(line, " | ")[0], "| `")))
			}
		}
		if !slices.Equal(order, k.Reasons().Reasons()) {
			t.Errorf("kind %s: docs/configuration.md's table lists %v, its set is %v", k.Name(), order, k.Reasons().Reasons())
		}
		for _, d := range k.Reasons() {
			for _, row := range rows[d.Reason] {
				if row[1] != up(d.Up) || row[2] == "" || row[3] == "" {
					t.Errorf("kind %s, docs/configuration.md: row %q: want up %s, a meaning and what to do", k.Name(), row, up(d.Up))
				}
			}
			found := false
			if provider.IsShared(d.Reason) {
				line := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(k.Doc().Title) + " \\(`provider=\"" + k.Name() + "\"`.* gives the shared reasons (.*?)[,.]( and these of its own:)?$").FindStringSubmatch(metrics)
				found = line != nil && slices.Contains(strings.Split(line[1], ", "), "`"+string(d.Reason)+"`")
				for _, row := range metricsRows[d.Reason] {
					found = found && len(row) == 4 && row[1] == up(d.Up)
				}
			} else {
				// From the kind's paragraph to the next kind's.
				start := strings.Index(metrics, "\n"+k.Doc().Title+" (`provider=")
				section := metrics[start+1:]
				if next := regexp.MustCompile("\n[A-Z][A-Za-z]* \\(`provider=").FindStringIndex(section); next != nil {
					section = section[:next[0]]
				}
				found = slices.ContainsFunc(tableReasons(section)[d.Reason], func(row []string) bool { return row[1] == up(d.Up) })
			}
			if !found {
				t.Errorf("kind %s: docs/metrics.md does not list %s (up %s) as the kind's", k.Name(), d.Reason, up(d.Up))
			}
			if d.Reason == provider.ReasonReady {
				continue
			}
			alert := "ProviderNotReady"
			if actionRequired[d.Reason] {
				alert = "ProviderActionRequired"
			}
			part := runbook[alert+" reasons"]
			item := regexp.MustCompile("(?m)^- [^:]*`" + string(d.Reason) + "`[^:]*: ").FindString(part)
			if item == "" {
				t.Errorf("kind %s: the runbook of %s does not name %s", k.Name(), alert, d.Reason)
			}
		}
	}
	if !strings.Contains(runbook["ProviderNotReady reasons"], "`HTTPError` (Toy): ") {
		t.Errorf("the runbook does not say that HTTPError is the toy kind's: %s", runbook["ProviderNotReady reasons"])
	}
	if regexp.MustCompile("(?m)^- [^:]*`Ready`").MatchString(runbook["ProviderNotReady reasons"]) {
		t.Error("the runbook lists Ready")
	}
}

// TestDocProblems: a kind without its docs is told what it lacks, reason
// by reason, and a description of a reason outside its set is a problem
// too.
func TestDocProblems(t *testing.T) {
	k := provider.NewKind(provider.KindOf[*toykind.Entry, *toykind.Checker]{
		Section:    config.Section{Kind: "bare", New: func() config.Entry { return &toykind.Entry{} }},
		Reasons:    toykind.Reasons(),
		NewChecker: toykind.New,
		Doc: provider.KindDoc{Reasons: map[provider.Reason]provider.ReasonDoc{
			"NotMine":                  {Means: "m", Action: "a"},
			provider.ReasonUnreachable: {Means: "only a meaning"},
		}},
	})
	got := strings.Join(k.DocProblems(), "\n")
	for _, want := range []string{
		"KindDoc.Title is empty", "KindDoc.Target is empty", "KindDoc.Example is empty", "KindDoc.Reference is empty",
		"reason HTTPError has no description",
		"reason Unreachable does not say what it means and what to do",
		"describes NotMine, which is not in its reason set",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("DocProblems does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "reason Timeout") {
		t.Errorf("a shared reason without the kind's own description has the shared one:\n%s", got)
	}
}

func TestKindPackage(t *testing.T) {
	if got := kindPackage(toykind.Kind()); got != "internal/toykind" {
		t.Errorf("kindPackage(toy) = %q, want internal/toykind", got)
	}
}
