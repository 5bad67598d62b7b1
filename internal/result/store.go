package result

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// TrialsFile is the name of the append-only trial log inside a results directory.
const TrialsFile = "results.jsonl"

// Store appends trials to DIR/results.jsonl, one JSON object per line. Every Append is
// followed by an fsync, so a crash loses at most the trial being written. A Store is safe
// for concurrent use by multiple goroutines (not by multiple processes).
type Store struct {
	mu   sync.Mutex
	f    *os.File
	path string
	size int64 // length of the file up to the end of the last complete line
}

// OpenStore creates dir if needed and opens DIR/results.jsonl for appending, creating it.
//
// If the last line of an existing file is truncated or garbled (a crash mid-write), the
// file is truncated to the end of the last good line so that later appends start on a clean
// line; a missing final newline after a good line is added. Garbage before the last line is
// not repaired: OpenStore returns the error LoadTrials would, naming the line.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create results dir: %w", err)
	}
	path := filepath.Join(dir, TrialsFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open trial store: %w", err)
	}
	sc, err := scanTrials(f, path, false)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := repairTail(f, sc); err != nil {
		f.Close()
		return nil, fmt.Errorf("repair %s: %w", path, err)
	}
	size := sc.goodLen
	if sc.missingNewline {
		size++
	}
	return &Store{f: f, path: path, size: size}, nil
}

// repairTail truncates a garbage tail and terminates a good last line lacking a newline.
func repairTail(f *os.File, sc scanResult) error {
	if sc.garbageTail {
		if err := f.Truncate(sc.goodLen); err != nil {
			return err
		}
	}
	if sc.missingNewline {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	if sc.garbageTail || sc.missingNewline {
		return f.Sync()
	}
	return nil
}

// Path returns the path of the trial log.
func (s *Store) Path() string { return s.path }

// Append writes t as one JSON line and syncs the file to stable storage. A trial that
// cannot be encoded (for example a NaN metric, which JSON cannot represent) is rejected
// and nothing is written. If the write fails, the file is truncated back so that no
// partial line is left behind.
func (s *Store) Append(t Trial) error {
	line, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode trial %s#%d: %w", t.Case.ID, t.Trial, err)
	}
	line = append(line, '\n')

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return fmt.Errorf("append to %s: %w", s.path, os.ErrClosed)
	}
	if _, err := s.f.Write(line); err != nil {
		// Best effort: do not leave a partial line for the next append to extend.
		_ = s.f.Truncate(s.size)
		return fmt.Errorf("append to %s: %w", s.path, err)
	}
	s.size += int64(len(line))
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", s.path, err)
	}
	return nil
}

// Close closes the store. Further Appends fail; closing twice is not an error.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// LoadTrials reads all trials of DIR/results.jsonl in file order. Blank lines are skipped.
// A truncated or garbled last line (a crash mid-write) is skipped silently; an undecodable
// line anywhere else is an error naming its line number. A missing file is an error
// satisfying errors.Is(err, fs.ErrNotExist).
func LoadTrials(dir string) ([]Trial, error) {
	path := filepath.Join(dir, TrialsFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc, err := scanTrials(f, path, true)
	if err != nil {
		return nil, err
	}
	return sc.trials, nil
}

type scanResult struct {
	trials         []Trial
	goodLen        int64 // offset just past the last good line (including its newline, if any)
	garbageTail    bool  // an undecodable last line follows goodLen
	missingNewline bool  // the last good line has no terminating newline
}

// scanTrials parses a JSONL trial log. An undecodable line is remembered; if another
// non-blank line follows, it is an error, otherwise it is the garbage tail.
func scanTrials(r io.Reader, name string, keep bool) (scanResult, error) {
	var (
		res      scanResult
		br       = bufio.NewReaderSize(r, 64*1024)
		offset   int64
		lineNo   int
		badLine  int // line number of a pending undecodable line, 0 if none
		badErr   error
		readErr  error
		line     []byte
		complete bool
	)
	for readErr == nil {
		line, readErr = br.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return res, fmt.Errorf("read %s: %w", name, readErr)
		}
		if len(line) == 0 {
			break
		}
		lineNo++
		start := offset
		offset += int64(len(line))
		complete = line[len(line)-1] == '\n'
		body := bytes.TrimSpace(line)
		if len(body) == 0 {
			if badLine == 0 {
				res.goodLen = offset
				res.missingNewline = false
			}
			continue
		}
		if badLine != 0 {
			return res, fmt.Errorf("%s:%d: corrupt trial record: %w", name, badLine, badErr)
		}
		t, err := decodeTrial(body)
		if err != nil {
			badLine, badErr = lineNo, err
			res.goodLen = start
			continue
		}
		if keep {
			res.trials = append(res.trials, t)
		}
		res.goodLen = offset
		res.missingNewline = !complete
	}
	res.garbageTail = badLine != 0
	if res.garbageTail {
		res.missingNewline = false
	}
	return res, nil
}

func decodeTrial(b []byte) (Trial, error) {
	var t Trial
	if b[0] != '{' {
		return t, errors.New("not a JSON object")
	}
	err := json.Unmarshal(b, &t)
	return t, err
}
