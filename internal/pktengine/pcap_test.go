package pktengine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnibench/cnibench/internal/netns"
)

// testdata/gtpu.pcap holds frames of the generator captured by tcpdump on the receiver's side
// of a veth pair; testdata/gtpu.txt is tcpdump's decode of them (`tcpdump -nn -v -r`), and
// testdata/gtpu-filters.txt what tcpdump's filters pick out of them (tcpdump 4.99 has no
// GTPv1-U printer: its filter language reads the GTP-U header and the inner packet by their
// offsets from the UDP header instead). TestRecordPcap records all three
// (CNIBENCH_RECORD=pcap, as root, with tcpdump installed).
const (
	pcapFile    = "testdata/gtpu.pcap"
	pcapText    = "testdata/gtpu.txt"
	pcapFilters = "testdata/gtpu-filters.txt"
	pcapFrames  = 24
	pcapTEID    = 7000
	pcapStreams = 3
)

// gtpFilter picks GTP-U G-PDUs (version 1, PT 1, no optional fields) to port 2152 whose
// length is the UDP payload's minus the GTP-U header and which carry an IPv4 packet (20-byte
// header) of that length with UDP 40000 -> 9 inside.
const gtpFilter = "udp dst port 2152 and udp[8]=0x30 and udp[9]=0xff and udp[10:2]=udp[4:2]-16" +
	" and udp[16]=0x45 and udp[18:2]=udp[10:2] and udp[25]=17 and udp[36:2]=40000 and udp[38:2]=9"

// pcapFilterList is what gtpu-filters.txt holds tcpdump's answers to: the well-formed G-PDUs,
// anything else, and the G-PDUs of each TEID.
func pcapFilterList() []string {
	f := []string{gtpFilter, "not (" + gtpFilter + ")"}
	for k := range pcapStreams {
		f = append(f, fmt.Sprintf("udp dst port 2152 and udp[8]=0x30 and udp[9]=0xff and udp[12:4]=%d", pcapTEID+k))
	}
	return f
}

// tcpdump read the generator's frames as what they claim to be: IPv4 with good header
// checksums and UDP 2152 -> 2152 of the right lengths (its decode), each a well-formed GTP-U
// G-PDU carrying IPv4/UDP, with the generator's TEIDs (its filters).
func TestTcpdumpSawGTPU(t *testing.T) {
	b, err := os.ReadFile(pcapText)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if strings.Contains(text, "bad cksum") || strings.Contains(text, "truncated") {
		t.Fatalf("tcpdump found damaged frames:\n%s", text)
	}
	// tcpdump -v prints a packet on two lines: the IPv4 header, then UDP.
	pkt := regexp.MustCompile(`flags \[DF\], proto UDP \(17\), length (\d+)\)\n +10\.252\.0\.1\.2152 > 10\.252\.0\.2\.2152: UDP, length (\d+)`)
	ms := pkt.FindAllStringSubmatch(text, -1)
	if len(ms) != pcapFrames || strings.Count(text, " IP ") != pcapFrames {
		t.Fatalf("tcpdump decoded %d of %d packets as the generator's IPv4/UDP:\n%s", len(ms), strings.Count(text, " IP "), text)
	}
	sizes := map[int]bool{}
	for _, m := range ms {
		ip, _ := strconv.Atoi(m[1])
		udp, _ := strconv.Atoi(m[2])
		if udp != ip-ipLen-udpLen {
			t.Errorf("IPv4 length %d, UDP payload %d", ip, udp)
		}
		sizes[ip+ethLen+FCSLen] = true
	}
	for _, s := range IMIX(GTPU) {
		if !sizes[s] {
			t.Errorf("tcpdump saw frame sizes %v, not %d", sizes, s)
		}
	}

	b, err = os.ReadFile(pcapFilters)
	if err != nil {
		t.Fatal(err)
	}
	matched := map[string]int{}
	var cur string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f, ok := strings.CutPrefix(l, "== "); ok {
			cur = f
			matched[cur] = 0
		} else if strings.Contains(l, " > 10.252.0.2.2152: UDP") {
			matched[cur]++
		}
	}
	want := pcapFilterList()
	if len(matched) != len(want) {
		t.Fatalf("%s answers %d filters, want %d (re-record it)", pcapFilters, len(matched), len(want))
	}
	if matched[want[0]] != pcapFrames || matched[want[1]] != 0 {
		t.Errorf("tcpdump found %d well-formed GTP-U G-PDUs and %d other packets, want %d and 0", matched[want[0]], matched[want[1]], pcapFrames)
	}
	sum := 0
	for k, f := range want[2:] {
		if matched[f] == 0 {
			t.Errorf("tcpdump found no G-PDU with TEID %d", pcapTEID+k)
		}
		sum += matched[f]
	}
	if sum != pcapFrames {
		t.Errorf("tcpdump found %d G-PDUs with TEIDs %d..%d, want all %d", sum, pcapTEID, pcapTEID+pcapStreams-1, pcapFrames)
	}
}

// The captured frames, as the kernel delivered them to tcpdump, parse back to consecutive
// sequence numbers per TEID.
func TestPcapParses(t *testing.T) {
	b, err := os.ReadFile(pcapFile)
	if err != nil {
		t.Fatal(err)
	}
	frames := readPcap(t, b)
	if len(frames) != pcapFrames {
		t.Fatalf("%d frames in %s, want %d", len(frames), pcapFile, pcapFrames)
	}
	next := map[uint32]uint64{}
	for i, f := range frames {
		p, ok := ParseFrame(f)
		if !ok || !p.GTP || p.TEID != p.Stream || p.TEID < pcapTEID || p.TEID >= pcapTEID+pcapStreams {
			t.Fatalf("frame %d: %+v, %v", i, p, ok)
		}
		if p.Seq != next[p.Stream] {
			t.Fatalf("frame %d: TEID %d sequence %d, want %d", i, p.Stream, p.Seq, next[p.Stream])
		}
		next[p.Stream]++
	}
}

// readPcap returns the frames of a pcap file (little-endian, Ethernet).
func readPcap(t *testing.T, b []byte) [][]byte {
	t.Helper()
	le := binary.LittleEndian
	if len(b) < 24 || (le.Uint32(b) != 0xa1b2c3d4 && le.Uint32(b) != 0xa1b23c4d) || le.Uint32(b[20:]) != 1 {
		t.Fatalf("not a little-endian Ethernet pcap file")
	}
	var out [][]byte
	for off := 24; off < len(b); {
		if off+16 > len(b) {
			t.Fatalf("record header cut at %d", off)
		}
		n := int(le.Uint32(b[off+8:]))
		if off+16+n > len(b) {
			t.Fatalf("record cut at %d", off)
		}
		out = append(out, b[off+16:off+16+n])
		off += 16 + n
	}
	return out
}

// TestRecordPcap re-records the pcap testdata: tcpdump captures in the receiver's
// namespace what the generator sends (IMIX, 3 TEIDs rotating every 100 ms).
func TestRecordPcap(t *testing.T) {
	if os.Getenv("CNIBENCH_RECORD") != "pcap" {
		t.Skip("records testdata/gtpu.pcap with CNIBENCH_RECORD=pcap")
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Fatal(err)
	}
	p := newPair(t)
	tmp := filepath.Join(t.TempDir(), "gtpu.pcap")
	var stderr bytes.Buffer
	// -U: each packet is written at once; the capture ends after pcapFrames frames.
	cmd := exec.Command("nsenter", "--net="+netns.Path(p.recv), "tcpdump", "-i", p.recvDev, "-U", "-w", tmp,
		"-c", strconv.Itoa(pcapFrames), "udp", "port", strconv.Itoa(GTPPort))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), "listening on"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump did not start: %s", stderr.String())
		}
	}
	o := genOptions(GTPU, "imix", 20, 1500*time.Millisecond)
	o.FirstTEID, o.Streams, o.Rotate, o.Engine, o.Dst, o.SrcPort, o.DstPort = pcapTEID, pcapStreams, 100*time.Millisecond, "af_packet", p.recvIP, GTPPort, GTPPort
	err := netns.Do(p.gen, func() error {
		_, err := RunGen(context.Background(), o)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tcpdump: %v: %s", err, stderr.String())
	}
	txt, err := exec.Command("tcpdump", "-nn", "-v", "-r", tmp).Output()
	if err != nil {
		t.Fatal(err)
	}
	var filtered bytes.Buffer
	for _, f := range pcapFilterList() {
		out, err := exec.Command("tcpdump", "-nn", "-r", tmp, f).Output()
		if err != nil {
			t.Fatalf("tcpdump %q: %v", f, err)
		}
		fmt.Fprintf(&filtered, "== %s\n%s", f, out)
	}
	if err := os.WriteFile(pcapFilters, filtered.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	pcap, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pcapFile, pcap, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pcapText, txt, 0o644); err != nil {
		t.Fatal(err)
	}
}
