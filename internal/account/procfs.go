package account

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TicksPerSecond is the unit of /proc's CPU times (USER_HZ: 100 on every Linux architecture
// cnibench runs on).
const TicksPerSecond = 100

// CPUTimes is cumulative CPU time in ticks, as a /proc/stat "cpu" or "cpuN" line has it.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is the sum of all fields.
func (s CPUTimes) Total() uint64 {
	return s.User + s.Nice + s.System + s.Idle + s.IOWait + s.IRQ + s.SoftIRQ + s.Steal
}

// Stat is what /proc/stat says of the CPUs: the aggregate line, each CPU's line and the
// context switches since boot.
type Stat struct {
	All  CPUTimes
	CPUs map[int]CPUTimes
	Ctxt uint64
}

// ParseStat parses /proc/stat.
func ParseStat(b []byte) (Stat, error) {
	st := Stat{CPUs: map[int]CPUTimes{}}
	seen := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "cpu":
			t, err := cpuTimes(f)
			if err != nil {
				return Stat{}, err
			}
			st.All, seen = t, true
		case strings.HasPrefix(f[0], "cpu"):
			n, err := strconv.Atoi(f[0][3:])
			if err != nil {
				return Stat{}, fmt.Errorf("/proc/stat: line %q: not a CPU", f[0])
			}
			t, err := cpuTimes(f)
			if err != nil {
				return Stat{}, err
			}
			st.CPUs[n] = t
		case f[0] == "ctxt" && len(f) == 2:
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return Stat{}, fmt.Errorf("/proc/stat ctxt: %w", err)
			}
			st.Ctxt = n
		}
	}
	if !seen {
		return Stat{}, fmt.Errorf("/proc/stat has no \"cpu\" line")
	}
	return st, nil
}

// cpuTimes reads the eight time fields of a cpu line (the guest fields after them are already
// counted in user and nice).
func cpuTimes(f []string) (CPUTimes, error) {
	if len(f) < 9 {
		return CPUTimes{}, fmt.Errorf("/proc/stat %s line: %d fields, want at least 9", f[0], len(f))
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat %s field %d: %w", f[0], i+1, err)
		}
		v[i] = n
	}
	return CPUTimes{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
}

// ParseSoftirqs parses /proc/softirqs into the NET_RX and NET_TX counts of each CPU.
func ParseSoftirqs(b []byte) (rx, tx map[int]uint64, err error) {
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 {
		return nil, nil, fmt.Errorf("/proc/softirqs is empty")
	}
	var cpus []int
	for _, h := range strings.Fields(lines[0]) {
		n, err := strconv.Atoi(strings.TrimPrefix(h, "CPU"))
		if err != nil || !strings.HasPrefix(h, "CPU") {
			return nil, nil, fmt.Errorf("/proc/softirqs header %q: want CPU0 CPU1 ...", lines[0])
		}
		cpus = append(cpus, n)
	}
	rx, tx = map[int]uint64{}, map[int]uint64{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) == 0 || (f[0] != "NET_RX:" && f[0] != "NET_TX:") {
			continue
		}
		if len(f) != len(cpus)+1 {
			return nil, nil, fmt.Errorf("/proc/softirqs %s: %d counts for %d CPUs", f[0], len(f)-1, len(cpus))
		}
		dst := rx
		if f[0] == "NET_TX:" {
			dst = tx
		}
		for i, s := range f[1:] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("/proc/softirqs %s: %w", f[0], err)
			}
			dst[cpus[i]] = n
		}
	}
	return rx, tx, nil
}

// Softnet is one CPU's row of /proc/net/softnet_stat.
type Softnet struct {
	Processed, Dropped, Squeezed uint64
}

// ParseSoftnet parses /proc/net/softnet_stat (hexadecimal columns; the 13th, where the kernel
// has it, is the CPU, else rows are CPUs 0, 1, ... in order).
func ParseSoftnet(b []byte) (map[int]Softnet, error) {
	out := map[int]Softnet{}
	row := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("/proc/net/softnet_stat row %d: %d columns, want at least 3", row, len(f))
		}
		var v [3]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 16, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/net/softnet_stat row %d: %w", row, err)
			}
			v[i] = n
		}
		cpu := row
		if len(f) >= 13 {
			n, err := strconv.ParseUint(f[12], 16, 32)
			if err != nil {
				return nil, fmt.Errorf("/proc/net/softnet_stat row %d cpu column: %w", row, err)
			}
			cpu = int(n)
		}
		out[cpu] = Softnet{Processed: v[0], Dropped: v[1], Squeezed: v[2]}
		row++
	}
	return out, nil
}

// HostSample is one reading of a machine's CPU counters.
type HostSample struct {
	At           time.Time
	Stat         Stat
	NetRx, NetTx map[int]uint64
	Softnet      map[int]Softnet
}

// Host files are the /proc files a HostSample is read from, in the order ParseHost takes them.
var HostFiles = []string{"stat", "softirqs", "net/softnet_stat"}

// ReadHost reads a host sample from a proc file system (usually "/proc").
func ReadHost(proc string) (HostSample, error) {
	var bs [][]byte
	for _, f := range HostFiles {
		b, err := os.ReadFile(filepath.Join(proc, f))
		if err != nil {
			return HostSample{}, err
		}
		bs = append(bs, b)
	}
	return ParseHost(time.Now(), bs[0], bs[1], bs[2])
}

// ParseHost makes a host sample of the contents of HostFiles.
func ParseHost(at time.Time, stat, softirqs, softnet []byte) (HostSample, error) {
	st, err := ParseStat(stat)
	if err != nil {
		return HostSample{}, err
	}
	rx, tx, err := ParseSoftirqs(softirqs)
	if err != nil {
		return HostSample{}, err
	}
	sn, err := ParseSoftnet(softnet)
	if err != nil {
		return HostSample{}, err
	}
	return HostSample{At: at, Stat: st, NetRx: rx, NetTx: tx, Softnet: sn}, nil
}

// HostDelta is what a machine's CPUs did between two samples, for the CPUs listed (nil: every
// CPU of the later sample), in CPU order.
func HostDelta(name string, a, b HostSample, cpus []int) Host {
	if cpus == nil {
		for c := range b.Stat.CPUs {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	h := Host{Name: name}
	if s := b.At.Sub(a.At).Seconds(); s > 0 && b.Stat.Ctxt >= a.Stat.Ctxt {
		h.CtxSwitchesPerS = float64(b.Stat.Ctxt-a.Stat.Ctxt) / s
	}
	for _, c := range cpus {
		t1, ok1 := a.Stat.CPUs[c]
		t2, ok2 := b.Stat.CPUs[c]
		if !ok1 || !ok2 {
			continue
		}
		cpu := CPU{CPU: c}
		if dt := float64(Sub(t2.Total(), t1.Total())); dt > 0 {
			pct := func(x, y uint64) float64 { return 100 * float64(Sub(x, y)) / dt }
			cpu.UserPct = pct(t2.User+t2.Nice, t1.User+t1.Nice)
			cpu.SystemPct = pct(t2.System, t1.System)
			cpu.IRQPct = pct(t2.IRQ, t1.IRQ)
			cpu.SoftIRQPct = pct(t2.SoftIRQ, t1.SoftIRQ)
			cpu.StealPct = pct(t2.Steal, t1.Steal)
			cpu.IdlePct = pct(t2.Idle+t2.IOWait, t1.Idle+t1.IOWait)
		}
		cpu.NetRx = float64(Sub(b.NetRx[c], a.NetRx[c]))
		cpu.NetTx = float64(Sub(b.NetTx[c], a.NetTx[c]))
		cpu.Processed = float64(Sub(b.Softnet[c].Processed, a.Softnet[c].Processed))
		cpu.Dropped = float64(Sub(b.Softnet[c].Dropped, a.Softnet[c].Dropped))
		cpu.Squeezed = float64(Sub(b.Softnet[c].Squeezed, a.Softnet[c].Squeezed))
		h.CPUs = append(h.CPUs, cpu)
	}
	return h
}

// Sub is b-a for counters, 0 when a counter went back (a CPU came back online, a process
// was replaced).
func Sub(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// KernelCounters are the nstat counters a trial records per namespace when they move: the
// ones that explain lost packets and retransmits.
var KernelCounters = []string{
	"IpInDiscards", "IpOutDiscards", "IpInHdrErrors", "IpInAddrErrors", "IpOutNoRoutes", "IpReasmFails", "IpFragFails",
	"TcpRetransSegs", "TcpInErrs", "TcpOutRsts", "TcpAttemptFails", "TcpEstabResets",
	"UdpInErrors", "UdpRcvbufErrors", "UdpSndbufErrors", "UdpNoPorts", "UdpInCsumErrors",
	"TcpExtTCPBacklogDrop", "TcpExtListenDrops", "TcpExtListenOverflows", "TcpExtTCPLostRetransmit",
	"TcpExtTCPTimeouts", "TcpExtTCPRcvQDrop", "TcpExtTCPZeroWindowDrop", "TcpExtTCPOFODrop",
	"TcpExtTCPFastRetrans", "TcpExtTCPSpuriousRTOs", "TcpExtPFMemallocDrop", "TcpExtTCPMinTTLDrop",
	// Reordering, and retransmits the receiver reported as needless (D-SACK) or the sender undid.
	"TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPOFOQueue", "TcpExtTCPDSACKRecv", "TcpExtTCPDSACKOldSent",
	"TcpExtTCPDSACKUndo", "TcpExtTCPFullUndo", "TcpExtTCPPartialUndo", "TcpExtTCPSackRecovery",
	"IpExtInNoRoutes", "IpExtInCsumErrors",
}

// ParseNstat reads /proc/net/snmp and /proc/net/netstat text (pairs of lines "Proto: names"
// and "Proto: values") into counters named as nstat names them (TcpRetransSegs,
// TcpExtTCPBacklogDrop).
func ParseNstat(texts ...[]byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, b := range texts {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			hp, hn, ok1 := strings.Cut(lines[i], ":")
			vp, vv, ok2 := strings.Cut(lines[i+1], ":")
			if !ok1 || !ok2 || hp != vp {
				return nil, fmt.Errorf("nstat: lines %d and %d are not a header and its values", i+1, i+2)
			}
			names, vals := strings.Fields(hn), strings.Fields(vv)
			if len(names) != len(vals) {
				return nil, fmt.Errorf("nstat %s: %d names, %d values", hp, len(names), len(vals))
			}
			for j, name := range names {
				// Counters are unsigned except a few gauges (Tcp MaxConn is -1): keep those out.
				if n, err := strconv.ParseUint(vals[j], 10, 64); err == nil {
					out[strings.TrimSpace(hp)+name] = n
				}
			}
		}
	}
	return out, nil
}

// KernelDelta is what the KernelCounters counted between two readings (only those that moved).
func KernelDelta(a, b map[string]uint64) map[string]float64 {
	out := map[string]float64{}
	for _, k := range KernelCounters {
		if d := Sub(b[k], a[k]); d > 0 {
			out[k] = float64(d)
		}
	}
	return out
}

// ProcStat is what a /proc/PID/stat or /proc/PID/task/TID/stat line says of a process or
// thread: its command, state, CPU times (ticks; CUTime and CSTime are those of its reaped
// children) and the CPU it last ran on.
type ProcStat struct {
	PID, PPID                    int
	Comm                         string
	State                        byte
	UTime, STime, CUTime, CSTime uint64
	Processor                    int
}

// Ticks is its own CPU time and its reaped children's.
func (p ProcStat) Ticks() uint64 { return p.UTime + p.STime + p.CUTime + p.CSTime }

// ParseProcStat parses a /proc/PID/stat line (the command, in parentheses, may hold spaces and
// parentheses: the fields start after the last ")").
func ParseProcStat(b []byte) (ProcStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return ProcStat{}, fmt.Errorf("proc stat %q: no command in parentheses", excerpt(b))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat %q: pid: %w", excerpt(b), err)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); utime is field 14, processor field 39.
	if len(f) < 37 || len(f[0]) != 1 {
		return ProcStat{}, fmt.Errorf("proc stat %q: %d fields after the command, want at least 37", excerpt(b), len(f))
	}
	var v [4]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[11+i], 10, 64); err != nil {
			return ProcStat{}, fmt.Errorf("proc stat %q: field %d: %w", excerpt(b), 14+i, err)
		}
	}
	cpu, err := strconv.Atoi(f[36])
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat %q: processor: %w", excerpt(b), err)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat %q: ppid: %w", excerpt(b), err)
	}
	return ProcStat{PID: pid, PPID: ppid, Comm: string(b[open+1 : end]), State: f[0][0], UTime: v[0], STime: v[1], CUTime: v[2], CSTime: v[3], Processor: cpu}, nil
}

func excerpt(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}

// DevCounters are one network device's counters, as netlink or /proc/net/dev give them.
type DevCounters struct {
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
	QdiscDrops                              uint64 // its qdiscs' drops (netlink only)
}

// ParseNetDev reads /proc/net/dev: each device's counters by name (lo included).
func ParseNetDev(b []byte) (map[string]DevCounters, error) {
	out := map[string]DevCounters{}
	for i, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if i < 2 || strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(rest)
		if !ok || len(f) < 16 {
			return nil, fmt.Errorf("/proc/net/dev line %d: want a device and 16 counters: %q", i+1, excerpt([]byte(line)))
		}
		var v [16]uint64
		for j := range v {
			n, err := strconv.ParseUint(f[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/net/dev line %d: counter %d: %w", i+1, j+1, err)
			}
			v[j] = n
		}
		out[strings.TrimSpace(name)] = DevCounters{RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/net/dev: no device in %q", excerpt(b))
	}
	return out, nil
}

// DevDelta is the hop a device makes between two readings of its counters (a counter that
// went back counts 0).
func DevDelta(where, dev, kind string, order int, a, b DevCounters) Hop {
	d := func(y, x uint64) float64 { return float64(Sub(y, x)) }
	return Hop{Where: where, Dev: dev, Kind: kind, Order: order,
		RxPackets: d(b.RxPackets, a.RxPackets), RxBytes: d(b.RxBytes, a.RxBytes),
		RxDropped: d(b.RxDropped, a.RxDropped), RxErrors: d(b.RxErrors, a.RxErrors),
		TxPackets: d(b.TxPackets, a.TxPackets), TxBytes: d(b.TxBytes, a.TxBytes),
		TxDropped: d(b.TxDropped, a.TxDropped), TxErrors: d(b.TxErrors, a.TxErrors),
		QdiscDrops: d(b.QdiscDrops, a.QdiscDrops)}
}
