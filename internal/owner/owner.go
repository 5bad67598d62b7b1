// Package owner records which process owns what cnibench left on a host (a lab's prefix, a run
// on a cluster), so housekeeping can tell a leftover of a dead process from the objects of a
// run still going: a PID alone is not enough (PIDs are reused), a PID with its start time is.
package owner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Record names an owning process.
type Record struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Start is the process's start time in clock ticks after boot (field 22 of /proc/PID/stat).
	Start   uint64 `json:"start"`
	Since   string `json:"since"`             // RFC 3339, when the record was made
	Command string `json:"command,omitempty"` // what the owner is ("cnibench run", "cnibench.test")
	// Kept marks objects left standing on purpose (cnibench lab up): the user owns them, and
	// only an explicit removal (lab down, --force) takes them away.
	Kept bool `json:"kept,omitempty"`
}

// Self is a record of this process.
func Self(command string) Record {
	host, _ := os.Hostname()
	start, _ := StartTicks(os.Getpid())
	return Record{Host: host, PID: os.Getpid(), Start: start, Since: time.Now().UTC().Format(time.RFC3339), Command: command}
}

// Alive tells whether the owner still runs: same host, and a process with its PID and start
// time exists.
func (r Record) Alive() bool {
	host, _ := os.Hostname()
	if r.Host != host || r.PID <= 0 {
		return false
	}
	start, err := StartTicks(r.PID)
	return err == nil && start == r.Start
}

// Live tells whether objects of this owner are in use: kept on purpose, or their owner alive.
func (r Record) Live() bool { return r.Kept || r.Alive() }

// String describes the owner for messages.
func (r Record) String() string {
	if r.Kept {
		return fmt.Sprintf("kept by %s (pid %d on %s, since %s)", orUnknown(r.Command), r.PID, r.Host, r.Since)
	}
	return fmt.Sprintf("pid %d on %s (%s, since %s)", r.PID, r.Host, orUnknown(r.Command), r.Since)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown command"
	}
	return s
}

// StartTicks reads a process's start time (clock ticks after boot) from /proc/PID/stat. The
// command name in that line may hold spaces and parentheses: fields are counted after the
// last ')'.
func StartTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStart(string(b))
}

func parseStart(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat line: no ')'")
	}
	// After "pid (comm)" come the fields from 3 (state) on; the start time is field 22.
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed stat line: %d fields after the command", len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Write stores r at path atomically (a temporary file renamed over it).
func Write(path string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".owner-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Read loads a record written by Write.
func Read(path string) (Record, error) {
	var r Record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
