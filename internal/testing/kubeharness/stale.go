package kubeharness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cnibench/cnibench/internal/lab"
	"github.com/cnibench/cnibench/internal/owner"
)

// Root is where every test cluster keeps its work directory (Config.Dir's default parent).
var Root = "/var/tmp/cnibench-kube"

// A cluster's work directory holds who made it and what it changed on the host, written before
// it changes anything, so that a cluster whose maker was killed (SIGKILL, a machine restart
// mid-test) can be taken down by the next one (CleanStale) and the host restored.
const (
	ownerFile = "owner.json"
	hostFile  = "host.json"
)

// hostRecord is what a cluster changes on the host outside its own directory.
type hostRecord struct {
	Sysctls map[string]string `json:"sysctls"` // global sysctls and their values before the cluster
	Created []string          `json:"created"` // host paths that did not exist before the cluster
}

// writeRecords records the harness as the cluster's owner and what it will change on the host.
func (h *Harness) writeRecords() error {
	if err := owner.Write(filepath.Join(h.cfg.Dir, ownerFile), owner.Self("kubeharness "+h.cfg.Prefix)); err != nil {
		return err
	}
	return writeHostRecord(h.cfg.Dir, hostRecord{Sysctls: h.restore, Created: h.created})
}

func writeHostRecord(dir string, rec hostRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, hostFile), b, 0o644)
}

// unrecordedGrace is how old a cluster directory without an owner record must be to count as a
// leftover: a cluster starting right now writes its record just after making the directory.
const unrecordedGrace = time.Minute

// CleanStale takes down every test cluster under Root whose maker is gone: its processes
// (container processes and shims included), mounts, cgroups, lab and work directory; and,
// when no live cluster is left that may rely on them, it restores the sysctls and removes the
// host paths that cluster changed. A cluster whose owner still runs is left alone. It returns
// one line per cluster it removed.
func CleanStale(log io.Writer) ([]string, error) {
	ents, err := os.ReadDir(Root)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type stale struct {
		dir string
		why string
		rec hostRecord
	}
	var found []stale
	live := false
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(Root, e.Name())
		r, rerr := owner.Read(filepath.Join(dir, ownerFile))
		switch {
		case rerr == nil && r.Alive():
			live = true
			continue
		case rerr == nil:
			found = append(found, stale{dir: dir, why: "its owner " + r.String() + " is gone"})
		default:
			if st, err := os.Stat(dir); err == nil && time.Since(st.ModTime()) < unrecordedGrace {
				live = true // being made right now
				continue
			}
			found = append(found, stale{dir: dir, why: "it has no owner record"})
		}
		if b, err := os.ReadFile(filepath.Join(dir, hostFile)); err == nil {
			_ = json.Unmarshal(b, &found[len(found)-1].rec)
		}
	}
	var removed []string
	var errs []error
	for _, s := range found {
		prefix := filepath.Base(s.dir)
		h := &Harness{cfg: Config{Prefix: prefix, Dir: s.dir}, restore: map[string]string{}}
		nodes, _ := filepath.Glob(filepath.Join(s.dir, "node*"))
		sort.Strings(nodes)
		for _, n := range nodes {
			name := filepath.Base(n)
			h.nodes = append(h.nodes, nodeInfo{name: name, dir: n, cgroupRoot: "/" + prefix + "-" + name})
		}
		note := ""
		if live {
			// Another cluster runs: the host paths and sysctls are its too now.
			note = "; host paths and sysctls left to the cluster still running"
		} else {
			h.restore, h.created = s.rec.Sysctls, s.rec.Created
			if len(s.rec.Sysctls) == 0 && len(s.rec.Created) == 0 {
				note = "; no host record: its sysctls and host paths cannot be restored"
			}
		}
		err := errors.Join(h.Down(), lab.Clean(prefix))
		if err != nil {
			errs = append(errs, fmt.Errorf("stale cluster %s: %w", s.dir, err))
		}
		line := fmt.Sprintf("removed stale test cluster %s (%s)%s", s.dir, s.why, note)
		removed = append(removed, line)
		if log != nil {
			fmt.Fprintf(log, "kubeharness: %s\n", line)
		}
	}
	return removed, errors.Join(errs...)
}
