// Package nftnltest holds what the engines' tests of internal/nftnl's translations share:
// the listings they compare with nft's.
package nftnltest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns/netnstest"
	"github.com/cnibench/cnibench/internal/nftnl"
	"github.com/cnibench/cnibench/internal/stats"
)

// IPTSave is iptables-nft-save -t table of the network namespace at ns without its comment
// lines (the tool's version and the time).
func IPTSave(t testing.TB, ns, table string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+ns, "iptables-nft-save", "-t", table).Output()
	if err != nil {
		t.Fatalf("iptables-nft-save -t %s: %v", table, err)
	}
	return saveComments.ReplaceAllString(string(out), "")
}

var saveComments = regexp.MustCompile(`(?m)^#.*\n?`)

// DebugListing is table ip TABLE in the network namespace at ns as `nft --debug=netlink list table` prints it: the listing,
// then every rule's expressions and user data, with the handles left out.
func DebugListing(t testing.TB, ns, table string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+ns, "nft", "--debug=netlink", "list", "table", "ip", table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v: %s", err, out)
	}
	// A set's elements come in the order of its hash table (seeded at random per set): they
	// are compared sorted, after the rest.
	var lines, elems []string
	for _, l := range strings.Split(nftHandles.ReplaceAllString(string(out), ""), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "element ") {
			elems = append(elems, l)
		} else {
			lines = append(lines, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(lines, elems...), "\n")
}

var nftHandles = regexp.MustCompile(` *# handle \d+| handle \d+`)

// FirstDiff shows the first line where a (nft's) and b (netlink's) differ, with some
// context ("" if none).
func FirstDiff(a, b string) string { return LineDiff("nft", "netlink", a, b) }

// LineDiff shows the first line where a and b, named so, differ, with the lines of a
// before it ("" if none).
func LineDiff(aName, bName, a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			lo := max(0, i-3)
			w := max(len(aName), len(bName)) + 1
			return fmt.Sprintf("line %d:\n%-*s %q\n%-*s %q\nbefore:\n%s", i+1, w, aName+":", x, w, bName+":", y, strings.Join(al[lo:i], "\n"))
		}
	}
	return ""
}

// RawObjects dumps the tables, chains, sets or rules of the network namespace at ns (msg:
// NFT_MSG_GETTABLE, ...) as the kernel holds them: every attribute but handles, positions and
// use counts, in hex, one object a line, sorted.
func RawObjects(t testing.TB, ns string, msg int) []string {
	t.Helper()
	f, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	replies, err := c.Execute(netlink.Message{Header: netlink.Header{Type: nftnl.Msg(msg), Flags: netlink.Request | netlink.Dump},
		Data: []byte{unix.NFPROTO_IPV4, unix.NFNETLINK_V0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	skip := map[int]map[uint16]bool{ // handles (NFTA_TABLE_HANDLE 4, NFTA_SET_HANDLE 16), use counts
		unix.NFT_MSG_GETTABLE: {4: true, unix.NFTA_TABLE_USE: true},
		unix.NFT_MSG_GETCHAIN: {unix.NFTA_CHAIN_HANDLE: true, unix.NFTA_CHAIN_USE: true},
		unix.NFT_MSG_GETSET:   {16: true},
		unix.NFT_MSG_GETRULE:  {unix.NFTA_RULE_HANDLE: true, unix.NFTA_RULE_POSITION: true},
	}[msg]
	var out []string
	for _, r := range replies {
		attrs, err := netlink.UnmarshalAttributes(r.Data[4:])
		if err != nil {
			t.Fatal(err)
		}
		var line []string
		for _, a := range attrs {
			if !skip[a.Type&^unix.NLA_F_NESTED] {
				line = append(line, fmt.Sprintf("%d=%x", a.Type, a.Data))
			}
		}
		out = append(out, strings.Join(line, " "))
	}
	slices.Sort(out)
	return out
}

// LoadBoth loads input into the network namespace at byNft with `nft -f` and into the one at
// byNetlink with apply (the engine's netlink writer); the test fails at once if either fails.
func LoadBoth(t testing.TB, byNft, byNetlink string, input []byte, apply func(ns string, in []byte) error) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+byNft, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(string(input))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	if err := apply(byNetlink, input); err != nil {
		t.Fatalf("netlink: %v", err)
	}
}

// Diff compares table ip TABLE as nft made it in byNft with what netlink made in byNetlink:
// the debug listings (every rule's expressions and user data, every element) and the
// attributes of the tables, chains and sets as the kernel holds them (RawObjects). It
// returns what differs first ("" if nothing) and nft's listing.
func Diff(t testing.TB, byNft, byNetlink, table string) (diff, listing string) {
	t.Helper()
	want, got := DebugListing(t, byNft, table), DebugListing(t, byNetlink, table)
	if got != want {
		return "the listing differs:\n" + FirstDiff(want, got), want
	}
	for _, msg := range []int{unix.NFT_MSG_GETTABLE, unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_GETSET} {
		w, g := RawObjects(t, byNft, msg), RawObjects(t, byNetlink, msg)
		if len(w) == 0 || !slices.Equal(g, w) {
			return fmt.Sprintf("the objects of message %d differ:\n got %q\nwant %q", msg, g, w), want
		}
	}
	return "", want
}

// Parts times the netlink way's three parts into the network namespace at ns: translate
// (the engine's translation of its rendering), marshalling the batch, and the sendmsg with
// the kernel's work; the benchmark fails on an error.
func Parts(tb testing.TB, ns string, translate func() (*nftnl.Batch, error)) (translated, marshalled, sent float64) {
	tb.Helper()
	t0 := time.Now()
	b, err := translate()
	if err != nil {
		tb.Fatal(err)
	}
	t1 := time.Now()
	msgs, err := b.Messages()
	if err != nil {
		tb.Fatal(err)
	}
	t2 := time.Now()
	if err := nftnl.Send(ns, msgs, nil); err != nil {
		tb.Fatal(err)
	}
	return t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), time.Since(t2).Seconds()
}

// Paired runs two ways of programming a namespace paired, for a benchmark: each iteration
// runs both, in alternating order, each into a fresh namespace and then again over the table
// it made (a full resync), then each (if not nil). Reported: the mean seconds of each way,
// fresh and again, and the ratio other/first with its 95 % interval.
func Paired(b *testing.B, first, other string, ways map[string]func(ns string) error, each func()) {
	took := map[string]map[int]float64{} // "<way> fresh|again" -> iteration -> s
	for i := range b.N {
		order := []string{first, other}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, w := range order {
			ns, _ := netnstest.Scratch(b)
			for _, when := range []string{"fresh", "again"} {
				t0 := time.Now()
				if err := ways[w](ns); err != nil {
					b.Fatalf("%s %s: %v", w, when, err)
				}
				k := w + " " + when
				if took[k] == nil {
					took[k] = map[int]float64{}
				}
				took[k][i] = time.Since(t0).Seconds()
			}
		}
		if each != nil {
			each()
		}
	}
	n := float64(b.N)
	for _, when := range []string{"fresh", "again"} {
		for _, w := range []string{first, other} {
			sum := 0.0
			for _, v := range took[w+" "+when] {
				sum += v
			}
			b.ReportMetric(sum/n, w+"_"+when+"_s")
		}
		r := stats.PairedRatio(took[other+" "+when], took[first+" "+when])
		b.ReportMetric(r.Ratio, other+"/"+first+"_"+when)
		b.ReportMetric(r.CI95Low, "ratio_lo_"+when)
		b.ReportMetric(r.CI95High, "ratio_hi_"+when)
	}
	b.ReportMetric(0, "ns/op")
}
