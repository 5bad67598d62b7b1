package report

import (
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/cnibench/cnibench/internal/result"
)

// termWidth is the most columns a line of the terminal renderings (Table, Compare) takes.
const termWidth = 100

// Style says how the terminal renderings look.
type Style struct {
	// Color marks the output up with ANSI escapes: the headline value bold, a ratio whose 95 %
	// interval excludes 1.0 green when it is better and red when it is worse, skipped and
	// disturbed yellow, failed and lost red. Without it the output holds not one escape byte.
	Color bool
}

// IsTerminal tells whether output to w should be coloured: w is an *os.File on a terminal,
// NO_COLOR is not set (https://no-color.org) and TERM is not "dumb"; CLICOLOR_FORCE (other
// than 0) forces colour whatever w is.
func IsTerminal(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	if v := os.Getenv("CLICOLOR_FORCE"); v != "" && v != "0" {
		return true
	}
	if os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// HigherIsBetter tells whether a larger value of metric is better. It is the one place that
// knows: rates (_per_s), throughput (_bps, _pps) and counts are better higher; times (_s, _ms,
// _us, jitter included), loss, retransmits and CPU use are better lower.
func HigherIsBetter(metric string) bool {
	switch {
	case strings.HasSuffix(metric, "_per_s"):
		return true
	case strings.HasSuffix(metric, "_s"), strings.HasSuffix(metric, "_ms"), strings.HasSuffix(metric, "_us"):
		return false
	case strings.HasPrefix(metric, "loss"), strings.HasPrefix(metric, "cpu_"), metric == "retransmits":
		return false
	}
	return true
}

// SGR parameters of the colours the renderings use.
const (
	sgrBold   = "1"
	sgrRed    = "31"
	sgrGreen  = "32"
	sgrYellow = "33"
)

// ratioSGR is the colour of a paired ratio of metric: green when its interval lies on the
// better side of 1.0, red on the worse side, none when it holds 1.0.
func ratioSGR(r result.RatioSummary, metric string) string {
	switch {
	case !r.Differs():
		return ""
	case (r.Ratio > 1) == HigherIsBetter(metric):
		return sgrGreen
	}
	return sgrRed
}

// statusSGR is the colour of a case status: skipped yellow, failed red.
func statusSGR(status string) string {
	switch status {
	case "ok":
		return ""
	case "skipped":
		return sgrYellow
	}
	return sgrRed
}

// seg is a piece of text in one style (sgr "" = plain).
type seg struct{ text, sgr string }

// segs is styled text: what a cell or a line holds.
type segs []seg

func plain(s string) segs { return segs{{s, ""}} }

func styled(sgr, s string) segs { return segs{{s, sgr}} }

// String is the text without its styles.
func (t segs) String() string {
	var sb strings.Builder
	for _, s := range t {
		sb.WriteString(s.text)
	}
	return sb.String()
}

// width is how many columns the text takes.
func (t segs) width() int {
	n := 0
	for _, s := range t {
		n += utf8.RuneCountInString(s.text)
	}
	return n
}

// slice is the runes [a, b) of the text, styles kept.
func (t segs) slice(a, b int) segs {
	var out segs
	pos := 0
	for _, s := range t {
		rs := []rune(s.text)
		lo, hi := max(a-pos, 0), min(b-pos, len(rs))
		if lo < hi {
			out = append(out, seg{string(rs[lo:hi]), s.sgr})
		}
		pos += len(rs)
	}
	return out
}

// render writes the text with its styles when st.Color is set, plain otherwise.
func (t segs) render(st Style) string {
	var sb strings.Builder
	for _, s := range t {
		if st.Color && s.sgr != "" && s.text != "" {
			sb.WriteString("\x1b[" + s.sgr + "m" + s.text + "\x1b[0m")
		} else {
			sb.WriteString(s.text)
		}
	}
	return sb.String()
}

// breakLines breaks text into lines of at most width runes, returned as rune ranges: at the
// last space that fits (dropped); a word longer than a line breaks after its last '/' that
// fits (kept: a case id breaks between its parts), or is cut when it has none. Empty text is
// one empty line.
func breakLines(text string, width int) [][2]int { return breakLinesAfter(text, width, "/") }

// breakLinesAfter is breakLines with the runes after which a long word may break.
func breakLinesAfter(text string, width int, after string) [][2]int {
	rs := []rune(text)
	width = max(width, 1)
	var out [][2]int
	start := 0
	for start < len(rs) {
		if len(rs)-start <= width {
			out = append(out, [2]int{start, len(rs)})
			break
		}
		limit := start + width // the line is rs[start:end], end <= limit
		end, next := limit, limit
		word := start // where the word that does not fit begins
		if i := lastRune(rs[start+1:limit+1], ' '); i >= 0 {
			end, next = start+1+i, start+2+i
			word = next
		}
		wordEnd := word
		for wordEnd < len(rs) && rs[wordEnd] != ' ' {
			wordEnd++
		}
		if wordEnd-word > width && word < limit {
			// The word needs breaking anyway: break it on this line already.
			if i := lastRuneOf(rs[word:limit], after); i >= 0 {
				end, next = word+i+1, word+i+1
			} else if word == start {
				end, next = limit, limit
			}
		}
		for end > start && rs[end-1] == ' ' {
			end--
		}
		out = append(out, [2]int{start, end})
		for start = next; start < len(rs) && rs[start] == ' '; start++ {
		}
	}
	if len(out) == 0 {
		out = append(out, [2]int{0, 0})
	}
	return out
}

// lastRune is the index of the last r in rs, -1 if none.
func lastRune(rs []rune, r rune) int { return lastRuneOf(rs, string(r)) }

// lastRuneOf is the index of the last rune of set in rs, -1 if none.
func lastRuneOf(rs []rune, set string) int {
	for i := len(rs) - 1; i >= 0; i-- {
		if strings.ContainsRune(set, rs[i]) {
			return i
		}
	}
	return -1
}

// wrapTo breaks styled text into lines of at most width columns (see breakLines).
func wrapTo(t segs, width int) []segs {
	var out []segs
	for _, r := range breakLines(t.String(), width) {
		out = append(out, t.slice(r[0], r[1]))
	}
	return out
}

// wrap breaks styled text into lines that fit the terminal width: the first indented by
// first spaces, the others by rest.
func wrap(t segs, first, rest int) []segs {
	lines := wrapTo(t, termWidth-max(first, rest))
	for i := range lines {
		ind := rest
		if i == 0 {
			ind = first
		}
		lines[i] = append(plain(strings.Repeat(" ", ind)), lines[i]...)
	}
	return lines
}

// wrapItems lays items out on lines of at most width columns, sep between them, breaking
// lines between items (inside one only when it is longer than a line).
func wrapItems(items []segs, sep string, width int) []segs {
	var out []segs
	var cur segs
	for _, it := range items {
		switch {
		case len(cur) == 0:
		case cur.width()+len(sep)+it.width() <= width:
			cur = append(append(cur, plain(sep)...), it...)
			continue
		default:
			out = append(out, append(cur, plain(strings.TrimRight(sep, " "))...))
		}
		lines := wrapTo(it, width)
		out = append(out, lines[:len(lines)-1]...)
		cur = lines[len(lines)-1]
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// termOut gathers the lines of a terminal rendering.
type termOut struct {
	st Style
	sb strings.Builder
}

// line writes one line, trailing blanks cut.
func (o *termOut) line(t segs) {
	o.sb.WriteString(strings.TrimRight(t.render(o.st), " "))
	o.sb.WriteByte('\n')
}

// para writes styled text wrapped to the width, continuation lines indented by rest.
func (o *termOut) para(t segs, first, rest int) {
	for _, l := range wrap(t, first, rest) {
		o.line(l)
	}
}

// text writes plain text wrapped like para.
func (o *termOut) text(s string, first, rest int) { o.para(plain(s), first, rest) }

func (o *termOut) blank() { o.sb.WriteByte('\n') }

func (o *termOut) flush(w io.Writer) error {
	_, err := io.WriteString(w, o.sb.String())
	return err
}

// row writes a row of a table under a group heading: the rest of its case id in the CASE
// column, caseW wide and indented by ind (broken between the id's parts when it does not
// fit), beside the lines of right, which start two columns after it.
func (o *termOut) row(rest string, ind, caseW int, right []segs) {
	var left []segs
	if ind+utf8.RuneCountInString(rest) <= caseW {
		left = []segs{plain(strings.Repeat(" ", ind) + rest)}
	} else {
		for i, l := range wrapTo(plain(rest), caseW-ind-2) {
			left = append(left, append(plain(strings.Repeat(" ", ind+2*min(i, 1))), l...))
		}
	}
	for i := range max(len(left), len(right)) {
		var l segs
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			l = append(pad(l, caseW+2), right[i]...)
		}
		o.line(l)
	}
}

// pad is t followed by blanks up to width columns.
func pad(t segs, width int) segs {
	if n := width - t.width(); n > 0 {
		return append(append(segs{}, t...), seg{strings.Repeat(" ", n), ""})
	}
	return t
}

// idGroup splits a case id into the heading it is listed under, its scenario and data plane
// with the parts the id names ("p2s/calico proxy=nftables"), and the rest: placement,
// protocol and scale ("inter/tcp/svc=100"). An id of fewer than three parts has no group.
func idGroup(id string) (group, rest string) {
	parts := strings.Split(id, "/")
	if len(parts) < 3 {
		return "", id
	}
	group = parts[0] + "/" + parts[1]
	var others []string
	for _, p := range parts[2:] {
		if strings.HasPrefix(p, "proxy=") || strings.HasPrefix(p, "policy=") {
			group += " " + p
		} else {
			others = append(others, p)
		}
	}
	return group, strings.Join(others, "/")
}
