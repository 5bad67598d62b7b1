package main

// The README is the project's front door and docs/ holds the rest (issue 32): these tests keep the
// README short, every relative link of the README and of docs/*.md pointing at a file that exists
// (and at a heading that exists, for an anchor into a Markdown file), and every file under docs/
// reachable by links from the README. They read files only: no root, no namespaces.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const readmeMaxLines = 300

// repoRoot walks up from the test's working directory to the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail to a page under docs/ and link it", n, readmeMaxLines)
	}
}

// mdDoc is what a Markdown file offers and asks for: its headings' anchors and its links.
type mdDoc struct {
	anchors map[string]bool
	links   []string // targets as written
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	headingRE = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	// [text](target) and ![alt](target), the text possibly wrapped over lines, an optional title.
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// A link inside a heading counts by its text.
	headingLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// parseMarkdown collects the headings and links of a Markdown text, leaving out fenced code blocks
// and inline code spans (where brackets and hashes are text, not syntax).
func parseMarkdown(text string) mdDoc {
	doc := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	var prose []string
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		if fence != "" {
			if m := fenceRE.FindStringSubmatch(line); m != nil && m[1][0] == fence[0] && len(m[1]) >= len(fence) {
				fence = ""
			}
			prose = append(prose, "")
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			prose = append(prose, "")
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			slug := githubSlug(m[1])
			if n := seen[slug]; n > 0 {
				doc.anchors[slug+"-"+strconv.Itoa(n)] = true
			} else {
				doc.anchors[slug] = true
			}
			seen[slug]++
		}
		prose = append(prose, line)
	}
	for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(strings.Join(prose, "\n")), -1) {
		doc.links = append(doc.links, m[1])
	}
	return doc
}

// stripCodeSpans blanks inline code: a run of N backticks up to the next run of exactly N.
func stripCodeSpans(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '`' {
			b.WriteByte(s[i])
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		open := s[i : i+n]
		end := -1
		for j := i + n; j < len(s); {
			k := strings.Index(s[j:], open)
			if k < 0 {
				break
			}
			k += j
			m := 0
			for k+m < len(s) && s[k+m] == '`' {
				m++
			}
			if m == n {
				end = k
				break
			}
			j = k + m
		}
		if end < 0 { // no closing run: the backticks are text
			b.WriteString(open)
			i += n
			continue
		}
		b.WriteString(" ")
		i = end + n
	}
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading: its text lower-cased, punctuation dropped but
// for '-' and '_', spaces turned into '-'.
func githubSlug(heading string) string {
	heading = headingLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	docsDir := filepath.Join(root, "docs")
	files := []string{filepath.Join(root, "README.md")}
	mds, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, mds...)
	docs := map[string]mdDoc{}
	parse := func(path string) (mdDoc, bool) {
		if d, ok := docs[path]; ok {
			return d, true
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return mdDoc{}, false
		}
		d := parseMarkdown(string(b))
		docs[path] = d
		return d, true
	}
	rel := func(p string) string {
		r, err := filepath.Rel(root, p)
		if err != nil {
			return p
		}
		return r
	}

	// Every relative link resolves; links[file] = the local files it points at.
	links := map[string][]string{}
	for _, f := range files {
		d, ok := parse(f)
		if !ok {
			t.Fatalf("reading %s", rel(f))
		}
		if len(d.links) == 0 {
			t.Errorf("%s links nowhere", rel(f))
		}
		for _, target := range d.links {
			lower := strings.ToLower(target)
			if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "mailto:") {
				continue
			}
			pathPart, anchor, _ := strings.Cut(target, "#")
			dest := f
			if pathPart != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(pathPart))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel(f), target, rel(dest))
					continue
				}
				links[f] = append(links[f], dest)
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				td, ok := parse(dest)
				if !ok {
					t.Errorf("%s: link %q: cannot read %s", rel(f), target, rel(dest))
				} else if !td.anchors[anchor] {
					t.Errorf("%s: link %q: %s has no heading with the anchor #%s", rel(f), target, rel(dest), anchor)
				}
			}
		}
	}

	// Every file under docs/ is reachable from the README, through the pages it links.
	reached := map[string]bool{}
	queue := []string{filepath.Join(root, "README.md")}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		if reached[f] {
			continue
		}
		reached[f] = true
		if strings.HasSuffix(f, ".md") {
			if _, ok := links[f]; !ok { // a Markdown file outside README.md and docs/*.md
				if d, ok := parse(f); ok {
					for _, target := range d.links {
						if p, _, _ := strings.Cut(target, "#"); p != "" && !strings.Contains(p, "://") {
							links[f] = append(links[f], filepath.Join(filepath.Dir(f), filepath.FromSlash(p)))
						}
					}
				}
			}
			queue = append(queue, links[f]...)
		}
	}
	var unlinked []string
	err = filepath.WalkDir(docsDir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && !reached[p] {
			unlinked = append(unlinked, rel(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(unlinked)
	for _, p := range unlinked {
		t.Errorf("%s: no chain of links from README.md reaches it", p)
	}

	// Each page under docs/ that the README links says where it belongs: it links back to the README.
	for _, f := range mds {
		if !slices.Contains(links[f], filepath.Join(root, "README.md")) {
			t.Errorf("%s does not link back to README.md", rel(f))
		}
	}
}

func TestDocsSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Two commands (Debian, as root)":                      "two-commands-debian-as-root",
		"The lab's `cilium` against real Cilium":              "the-labs-cilium-against-real-cilium",
		"Is the bare veth pair the ceiling?":                  "is-the-bare-veth-pair-the-ceiling",
		"n2s, from outside to a NodePort":                     "n2s-from-outside-to-a-nodeport",
		"One NF against the bare pair (seed 000, first part)": "one-nf-against-the-bare-pair-seed-000-first-part",
		"Links [to a page](x.md) count by text":               "links-to-a-page-count-by-text",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", in, got, want)
		}
	}
	d := parseMarkdown("# A\n\n```\n# not a heading [x](nowhere.md)\n```\n\n## A\n\nsee `[y](nowhere.md)` and [z](\nz.md#a-1)\n")
	if !d.anchors["a"] || !d.anchors["a-1"] || d.anchors["not-a-heading-xnowheremd"] {
		t.Errorf("anchors %v, want a and a-1 (a repeated heading) and nothing from the code block", d.anchors)
	}
	if !slices.Equal(d.links, []string{"z.md#a-1"}) {
		t.Errorf("links %q, want only z.md#a-1 (none from code)", d.links)
	}
}
