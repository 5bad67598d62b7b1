package clustertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// The recordings are the driver's own (internal/driver/testdata, made by record.sh and
// TestLiveHTTPReplicas): the fake replays them and never makes up a tool's output.
var (
	recMu    sync.Mutex
	recFiles = map[string][]byte{}
)

// recorded returns a file of internal/driver/testdata.
func recorded(name string) ([]byte, error) {
	recMu.Lock()
	defer recMu.Unlock()
	if b, ok := recFiles[name]; ok {
		return b, nil
	}
	dir, err := testdataDir()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("clustertest: recorded output: %w", err)
	}
	recFiles[name] = b
	return b, nil
}

// testdataDir is internal/driver/testdata, found from this source file (or, in a build with
// -trimpath, from the module root above the working directory, which go test sets to the
// tested package's directory).
func testdataDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Join(filepath.Dir(file), "..", "..", "driver", "testdata"), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "internal", "driver", "testdata"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("clustertest: internal/driver/testdata not found (no go.mod above the working directory)")
		}
		dir = parent
	}
}
