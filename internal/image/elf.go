package image

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// elfInfo is the ELF flavour of the image's architecture.
type elfInfo struct {
	goarch  string
	machine elf.Machine
	class   elf.Class
	triplet string // Debian multiarch directory name
}

var arches = []elfInfo{
	{"amd64", elf.EM_X86_64, elf.ELFCLASS64, "x86_64-linux-gnu"},
	{"arm64", elf.EM_AARCH64, elf.ELFCLASS64, "aarch64-linux-gnu"},
	{"386", elf.EM_386, elf.ELFCLASS32, "i386-linux-gnu"},
	{"arm", elf.EM_ARM, elf.ELFCLASS32, "arm-linux-gnueabihf"},
	{"riscv64", elf.EM_RISCV, elf.ELFCLASS64, "riscv64-linux-gnu"},
	{"ppc64le", elf.EM_PPC64, elf.ELFCLASS64, "powerpc64le-linux-gnu"},
	{"s390x", elf.EM_S390, elf.ELFCLASS64, "s390x-linux-gnu"},
}

func elfMachine(goarch string) (elfInfo, error) {
	for _, a := range arches {
		if a.goarch == goarch {
			return a, nil
		}
	}
	return elfInfo{}, fmt.Errorf("image: unsupported architecture %s", goarch)
}

// libDirs are the directories the dynamic loader searches by default, in
// its order.
func (a elfInfo) libDirs() []string {
	dirs := []string{"/lib/" + a.triplet, "/usr/lib/" + a.triplet}
	if a.class == elf.ELFCLASS64 {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return append(dirs, "/lib", "/usr/lib")
}

// matches reports whether the host file at p is an ELF object of the
// image's architecture.
func (a elfInfo) matches(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Machine == a.machine && f.Class == a.class
}

// resolveLibraries adds the interpreter and shared libraries of every
// queued ELF file, and theirs, until nothing new turns up.
func (r *rootfs) resolveLibraries() error {
	for len(r.elfs) > 0 {
		p := r.elfs[0]
		r.elfs = r.elfs[1:]
		if err := r.resolveELF(p); err != nil {
			return err
		}
	}
	return nil
}

// resolveELF adds what the image file p needs to run: its PT_INTERP and
// its DT_NEEDED libraries, searched like the loader does (DT_RPATH or
// DT_RUNPATH, then the default directories). A file that is not ELF (a
// script, say) needs nothing.
func (r *rootfs) resolveELF(p string) error {
	src := r.entries[p].src
	f, err := elf.Open(src)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil
		}
		return fmt.Errorf("image: %s: %w", src, err)
	}
	defer f.Close()
	if f.Machine != r.elf.machine || f.Class != r.elf.class {
		return fmt.Errorf("image: %s is built for %v (%v), not for the image's %s", src, f.Machine, f.Class, r.elf.goarch)
	}
	var interp string
	dynamic := false
	for _, prog := range f.Progs {
		switch prog.Type {
		case elf.PT_INTERP:
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return fmt.Errorf("image: %s: reading PT_INTERP: %w", src, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		case elf.PT_DYNAMIC:
			dynamic = true
		}
	}
	if dynamic && f.SectionByType(elf.SHT_DYNAMIC) == nil {
		return fmt.Errorf("image: %s: dynamic ELF without section headers; cannot read its libraries", src)
	}
	if interp != "" {
		if !filepath.IsAbs(interp) {
			return fmt.Errorf("image: %s: relative ELF interpreter %q", src, interp)
		}
		if err := r.addLib(filepath.Clean(interp)); err != nil {
			return err
		}
	}
	needed, err := f.DynString(elf.DT_NEEDED)
	if err != nil {
		return fmt.Errorf("image: %s: %w", src, err)
	}
	if len(needed) == 0 {
		return nil
	}
	rpath, err := f.DynString(elf.DT_RPATH)
	if err != nil {
		return fmt.Errorf("image: %s: %w", src, err)
	}
	runpath, err := f.DynString(elf.DT_RUNPATH)
	if err != nil {
		return fmt.Errorf("image: %s: %w", src, err)
	}
	origin := filepath.Dir(src)
	var search []string
	if len(runpath) == 0 {
		search = append(search, searchPath(rpath, origin)...)
	}
	search = append(search, searchPath(runpath, origin)...)
	search = append(search, r.elf.libDirs()...)
	for _, lib := range needed {
		if strings.Contains(lib, "/") {
			if !filepath.IsAbs(lib) {
				return fmt.Errorf("image: %s needs %s, a relative path", src, lib)
			}
			if err := r.addLib(filepath.Clean(lib)); err != nil {
				return err
			}
			continue
		}
		found := ""
		for _, d := range search {
			if c := filepath.Join(d, lib); r.elf.matches(c) {
				found = c
				break
			}
		}
		if found == "" {
			return fmt.Errorf("image: %s needs %s, found in none of %s", src, lib, strings.Join(search, ", "))
		}
		if err := r.addLib(found); err != nil {
			return err
		}
	}
	return nil
}

// searchPath expands DT_RPATH/DT_RUNPATH values. Entries with substitutions
// other than $ORIGIN, and relative ones, are dropped.
func searchPath(vals []string, origin string) []string {
	var dirs []string
	for _, v := range vals {
		for _, d := range strings.Split(v, ":") {
			d = strings.ReplaceAll(d, "${ORIGIN}", origin)
			d = strings.ReplaceAll(d, "$ORIGIN", origin)
			if d == "" || strings.Contains(d, "$") || !filepath.IsAbs(d) {
				continue
			}
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	return dirs
}

// addLib adds a library (or the interpreter) at its host path, keeping
// symlinks; copyFile queues the real file for its own libraries.
func (r *rootfs) addLib(hostPath string) error {
	if r.libs[hostPath] {
		return nil
	}
	r.libs[hostPath] = true
	_, err := r.addHostPath(hostPath)
	return err
}
