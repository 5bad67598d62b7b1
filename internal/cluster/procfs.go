package cluster

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/cnibench/cnibench/internal/account"
)

// ParseProcStat parses the aggregate "cpu" line of /proc/stat (its first), which every backend
// reads for node CPU accounting.
func ParseProcStat(b []byte) (CPUSample, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	st, err := account.ParseStat(line)
	if err != nil {
		return CPUSample{}, err
	}
	return st.All, nil
}

// ListeningPorts parses /proc/net/tcp and /proc/net/tcp6 text (concatenated) into the set of
// local ports in LISTEN state (st 0A): how every backend tells that a server is ready.
func ListeningPorts(b []byte) map[int]bool {
	ports := map[int]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		if port, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil {
			ports[int(port)] = true
		}
	}
	return ports
}
