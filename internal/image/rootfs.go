package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// entry is one node of the image's root filesystem.
type entry struct {
	typ    byte   // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode   int64  // permission bits
	src    string // regular file copied from this host path
	data   []byte // regular file with generated content (src == "")
	size   int64  // size of a regular file
	target string // symlink target
}

func (e *entry) same(o *entry) bool {
	return e.typ == o.typ && e.mode == o.mode && e.src == o.src &&
		bytes.Equal(e.data, o.data) && e.target == o.target
}

// rootfs is the image's file tree, keyed by cleaned absolute path. Every
// directory in it is a real directory: paths never go through a symlink, so
// a symlink target can be resolved lexically, exactly as the kernel will do
// inside the container.
type rootfs struct {
	entries map[string]*entry
	elf     elfInfo         // machine and class every ELF file must have
	elfs    []string        // image paths of regular ELF files whose libraries are to be resolved
	libs    map[string]bool // host library paths already looked at
}

func newRootfs(machine elfInfo) *rootfs {
	return &rootfs{entries: map[string]*entry{}, elf: machine, libs: map[string]bool{}}
}

// add puts e at p, creating its parent directories. Adding an identical
// entry twice is fine; anything else at an existing path is a conflict.
func (r *rootfs) add(p string, e *entry) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("image: bad image path %q", p)
	}
	if parent := path.Dir(p); parent != "/" {
		if err := r.dir(parent, 0o755); err != nil {
			return err
		}
	}
	if old, ok := r.entries[p]; ok {
		if old.same(e) {
			return nil
		}
		return fmt.Errorf("image: conflicting contents for %s", p)
	}
	r.entries[p] = e
	return nil
}

// dir adds directory p and its parents; an existing directory keeps its mode.
func (r *rootfs) dir(p string, mode int64) error {
	if old, ok := r.entries[p]; ok {
		if old.typ != tar.TypeDir {
			return fmt.Errorf("image: %s is both a directory and a file", p)
		}
		return nil
	}
	return r.add(p, &entry{typ: tar.TypeDir, mode: mode})
}

// file adds a regular file with generated content.
func (r *rootfs) file(p string, mode int64, data []byte) error {
	return r.add(p, &entry{typ: tar.TypeReg, mode: mode, data: data, size: int64(len(data))})
}

// symlink adds a symbolic link p -> target.
func (r *rootfs) symlink(p, target string) error {
	return r.add(p, &entry{typ: tar.TypeSymlink, mode: 0o777, target: target})
}

// copyFile copies the host file at host (following symlinks) to image path
// p as a regular file, and queues it for library resolution if it is ELF.
func (r *rootfs) copyFile(p, host string) error {
	fi, err := os.Stat(host)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("image: %s: not a regular file", host)
	}
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	_, seen := r.entries[p]
	if err := r.add(p, &entry{typ: tar.TypeReg, mode: int64(fi.Mode().Perm()), src: real, size: fi.Size()}); err != nil {
		return err
	}
	if !seen {
		r.elfs = append(r.elfs, p)
	}
	return nil
}

// addHostPath copies the host path p to the same path in the image. A
// symlink stays a symlink and its target is added too, recursively. It
// returns the image path of the regular file p finally resolves to.
func (r *rootfs) addHostPath(p string) (string, error) {
	for hops := 0; ; hops++ {
		if hops > 40 {
			return "", fmt.Errorf("image: %s: too many levels of symbolic links", p)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("image: %w", err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return p, r.copyFile(p, p)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("image: %w", err)
		}
		next := target
		if !path.IsAbs(next) {
			next = path.Join(path.Dir(p), next)
		}
		next = path.Clean(next)
		// On the host, p's directory may itself be a symlink (merged /usr),
		// so "../" in target may mean something else than in the image,
		// where directories are real. If the lexical reading lands on a
		// different file, point the link at the host's canonical answer.
		if !sameFile(p, next) {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return "", fmt.Errorf("image: %w", err)
			}
			target, next = real, real
		}
		if err := r.symlink(p, target); err != nil {
			return "", err
		}
		p = next
	}
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(fa, fb)
}

// tarWriter writes deterministic headers: root-owned, fixed mtime.
type tarWriter struct{ *tar.Writer }

var epoch = time.Unix(0, 0).UTC()

func newTarWriter(w io.Writer) tarWriter { return tarWriter{tar.NewWriter(w)} }

func (tw tarWriter) header(h *tar.Header) error {
	h.ModTime = epoch
	h.Uname, h.Gname = "root", "root"
	return tw.WriteHeader(h)
}

func (tw tarWriter) dir(name string, mode int64) error {
	return tw.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
}

func (tw tarWriter) file(name string, mode int64, r io.Reader, size int64) error {
	if err := tw.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size}); err != nil {
		return err
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s: size changed while reading", name)
	}
	return nil
}

func (tw tarWriter) symlink(name, target string) error {
	return tw.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
}

// tar renders the tree as an uncompressed layer tar, entries in path order
// (so every directory precedes its contents).
func (r *rootfs) tar() ([]byte, Manifest, error) {
	var buf bytes.Buffer
	var man Manifest
	tw := newTarWriter(&buf)
	for _, p := range sortedKeys(r.entries) {
		e := r.entries[p]
		name := strings.TrimPrefix(p, "/")
		man.Files = append(man.Files, p)
		var err error
		switch e.typ {
		case tar.TypeDir:
			err = tw.dir(name, e.mode)
		case tar.TypeSymlink:
			err = tw.symlink(name, e.target)
		case tar.TypeReg:
			man.Bytes += e.size
			if e.src == "" {
				err = tw.file(name, e.mode, bytes.NewReader(e.data), e.size)
				break
			}
			var f *os.File
			if f, err = os.Open(e.src); err != nil {
				break
			}
			err = tw.file(name, e.mode, f, e.size)
			f.Close()
		}
		if err != nil {
			return nil, Manifest{}, fmt.Errorf("image: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, Manifest{}, fmt.Errorf("image: %w", err)
	}
	return buf.Bytes(), man, nil
}
