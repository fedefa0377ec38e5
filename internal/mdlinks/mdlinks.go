// Package mdlinks checks the repository's Markdown: every relative link names
// a file that exists and every #anchor a heading of that file, with the slugs
// GitHub gives headings; and every comment that cites a documentation section,
// such as (docs/metrics.md: "Reasons"), names a section that exists. The
// documentation is split over README.md and docs/ (README: "Where to go
// next"), so a moved section silently breaks links nobody clicks in review.
package mdlinks

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one broken link or citation, located by file and line.
type Problem struct {
	File string
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

var (
	fenceRE   = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	headingRE = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// inline links and images: [text](dest) or [text](dest "title").
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// reference definitions: [label]: dest
	refDefRE    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?$`)
	codeSpanRE  = regexp.MustCompile("`+[^`]*`+")
	htmlIDRE    = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	inlineLinkR = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Slug is the anchor GitHub gives a heading's text (before de-duplication):
// inline markup reduced to its text, lower-cased, every character that is not
// a letter, a digit, a space, '-' or '_' dropped, spaces turned into '-'.
func Slug(heading string) string {
	t := inlineLinkR.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(t) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Doc is what the checker knows of one Markdown file.
type Doc struct {
	// Anchors are the fragment identifiers the file defines.
	Anchors map[string]bool
	// Headings are the headings' texts, inline code marks removed, as a
	// citation names them.
	Headings map[string]bool
	links    []link
}

type link struct {
	line int
	dest string
}

// Parse reads one Markdown file: its headings (with GitHub's numbering of
// duplicate slugs: the second "Reasons" is #reasons-1) and its links,
// ignoring fenced code blocks and code spans.
func Parse(text string) *Doc {
	d := &Doc{Anchors: map[string]bool{}, Headings: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			d.Anchors[m[1]] = true
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			h := strings.ReplaceAll(m[2], "`", "")
			d.Headings[inlineLinkR.ReplaceAllString(h, "$1")] = true
			s := Slug(h)
			if n := seen[s]; n > 0 {
				d.Anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				d.Anchors[s] = true
			}
			seen[s]++
		}
		plain := codeSpanRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
		if m := refDefRE.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
		}
	}
	return d
}

// CheckLinks checks the relative links of the Markdown files (slash-separated
// paths in fsys). External links (a URL scheme) are not fetched.
func CheckLinks(fsys fs.FS, files []string) ([]Problem, error) {
	docs := map[string]*Doc{}
	load := func(name string) (*Doc, error) {
		if d, ok := docs[name]; ok {
			return d, nil
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		docs[name] = Parse(string(b))
		return docs[name], nil
	}
	var probs []Problem
	for _, f := range files {
		d, err := load(f)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			if msg := checkLink(fsys, f, l.dest, load); msg != "" {
				probs = append(probs, Problem{f, l.line, msg})
			}
		}
	}
	return probs, nil
}

var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

func checkLink(fsys fs.FS, from, dest string, load func(string) (*Doc, error)) string {
	if schemeRE.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, frag, _ := strings.Cut(dest, "#")
	name := from
	if target != "" {
		if strings.HasPrefix(target, "/") {
			return fmt.Sprintf("link %q: absolute path; use a path relative to %s", dest, from)
		}
		name = path.Join(path.Dir(from), target)
		if name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Sprintf("link %q: leaves the repository", dest)
		}
		if _, err := fs.Stat(fsys, name); err != nil {
			return fmt.Sprintf("link %q: %s does not exist", dest, name)
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(name, ".md") {
		return fmt.Sprintf("link %q: an anchor into %s, which is not Markdown", dest, name)
	}
	d, err := load(name)
	if err != nil {
		return fmt.Sprintf("link %q: %v", dest, err)
	}
	if !d.Anchors[frag] {
		return fmt.Sprintf("link %q: %s has no heading with anchor #%s%s", dest, name, frag, suggest(d, frag))
	}
	return ""
}

func suggest(d *Doc, frag string) string {
	var near []string
	for a := range d.Anchors {
		if strings.HasPrefix(a, frag) || strings.HasPrefix(frag, a) {
			near = append(near, "#"+a)
		}
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	return " (did you mean " + strings.Join(near, ", ") + "?)"
}

// A citation in a comment: README or docs/x.md, optionally "'s", optionally a
// colon, then one or more quoted section names separated by commas. Comment
// markers at line starts are removed first so a citation may wrap.
var (
	citationRE   = regexp.MustCompile(`\b(README|docs/[A-Za-z0-9_-]+\.md)(?:'s)?:?\s+((?:"[^"]{1,100}"(?:,\s*|\s+and\s+)?)+)`)
	quotedRE     = regexp.MustCompile(`"([^"]{1,100})"`)
	commentMarks = regexp.MustCompile(`\n[ \t]*(?://|#|--)[ \t]?`)
)

// CheckCitations checks every citation of a documentation section in the
// given source files: the page must exist and have a heading of that exact
// text (inline code marks removed). The page README means README.md.
func CheckCitations(fsys fs.FS, files []string) ([]Problem, error) {
	pages := map[string]*Doc{}
	var probs []Problem
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		text := commentMarks.ReplaceAllStringFunc(string(b), func(s string) string {
			// keep the newline so line numbers stay right
			return "\n" + strings.Repeat(" ", len(s)-1)
		})
		for _, m := range citationRE.FindAllStringSubmatchIndex(text, -1) {
			page := text[m[2]:m[3]]
			if page == "README" {
				page = "README.md"
			}
			line := 1 + strings.Count(text[:m[0]], "\n")
			d, ok := pages[page]
			if !ok {
				pb, err := fs.ReadFile(fsys, page)
				if err != nil {
					probs = append(probs, Problem{f, line, fmt.Sprintf("cites %s, which does not exist", page)})
					continue
				}
				d = Parse(string(pb))
				pages[page] = d
			}
			for _, q := range quotedRE.FindAllStringSubmatch(text[m[4]:m[5]], -1) {
				sec := strings.Join(strings.Fields(q[1]), " ")
				if !d.Headings[sec] {
					probs = append(probs, Problem{f, line, fmt.Sprintf("cites %s: %q, which has no such section", page, sec)})
				}
			}
		}
	}
	return probs, nil
}
