// Package image assembles the cnibench "tools image": a minimal Linux root
// filesystem holding the measurement tools (iperf3, netperf, netserver, nginx,
// curl, taskset), busybox, the cnibench binary itself and every shared
// library those dynamic binaries need, packed as a single-layer container
// image tarball that can be imported with `ctr images import` or
// `docker load` on the nodes of a real Kubernetes cluster.
//
// The binaries are taken from the build host, so the host must have the
// Debian packages named by the errors of Build installed. The build is
// reproducible: the same host files give the same image digest.
package image

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cnibench/cnibench/internal/driver"
	"github.com/cnibench/cnibench/internal/hosttools"
	"github.com/cnibench/cnibench/internal/nf"
	_ "github.com/cnibench/cnibench/internal/nf/kinds" // the network functions that run in pods
)

// DefaultTag is the image reference recorded when Options.Tag is empty.
const DefaultTag = "cnibench/tools:latest"

// Image formats accepted by Options.Format.
const (
	FormatDocker = "docker" // docker-archive (docker save layout)
	FormatOCI    = "oci"    // OCI image layout, tarred
)

// Paths inside the image.
const (
	SelfPath    = "/usr/local/bin/cnibench"
	BusyboxPath = driver.BusyboxPath
	NginxConf   = "/etc/nginx/nginx.conf"
	NginxPort   = driver.HTTPPort // where /etc/nginx/nginx.conf serves /srv: where replicas listen
)

// ImagePath is the PATH set in the image config.
const ImagePath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// Cmd is the image's default command: keep the container alive so the
// benchmark can exec its tools in it.
var Cmd = []string{BusyboxPath, "sleep", "infinity"}

// BusyboxApplets are linked to /bin/busybox as /bin/NAME.
var BusyboxApplets = []string{
	"sh", "sleep", "cat", "ls", "ps", "kill", "mkdir", "echo", "env",
	"true", "false", "wget", "nc", "ip",
}

// Options tune Build. The zero value builds DefaultTag as a docker-archive
// around the running executable.
type Options struct {
	Tag    string   // image reference to record in the tarball, default "cnibench/tools:latest"
	Self   string   // path of the cnibench binary to include as /usr/local/bin/cnibench (default: os.Executable())
	Extra  []string // extra host binaries to include (absolute paths), kept at their host paths with their libraries
	Format string   // "docker" (docker-archive, importable with `ctr images import` and `docker load`) or "oci" (OCI layout tarball); default docker
}

// Manifest says what went into the image.
type Manifest struct {
	Files []string // every path in the root filesystem (directories, files, symlinks), absolute, sorted
	Bytes int64    // total uncompressed size of the regular files' contents
}

// tool is one host binary the image ships: name is its file name, found on PATH or in the sbin
// directories, pkg the Debian package to install when it is missing.
type tool struct{ name, pkg string }

// tools are what pods run: every driver's tools, taskset, which pins each of them, and the
// tools of the network functions that run in pods.
var tools = func() []tool {
	var out []tool
	names := append(driver.AllTools(), "taskset")
	for _, k := range nf.PodKinds() {
		for _, n := range k.PodTools() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, name := range names {
		t, err := hosttools.Get(name)
		if err != nil {
			panic(err) // hosttools' test keeps the table complete
		}
		pkg := t.Package
		if t.NonFree {
			pkg += " (in the non-free component)"
		}
		out = append(out, tool{t.Base(), pkg})
	}
	return out
}()

// Tools returns the names of the host binaries Build looks up in PATH and
// the sbin directories and puts into the image.
func Tools() []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.name
	}
	return out
}

// toolDirs are searched after PATH: sbin directories are often not in a
// normal user's PATH.
var toolDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// lookupTool finds a tool on the host. It returns the path to read and the
// path to use in the image: the host path with its directory's symlinks
// resolved, so /bin/iperf3 on a merged-/usr host lands at /usr/bin/iperf3.
func lookupTool(t tool) (host, img string, err error) {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	dirs = append(dirs, toolDirs...)
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, t.name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		rd, err := filepath.EvalSymlinks(d)
		if err != nil {
			rd = d
		}
		return p, filepath.Join(rd, t.name), nil
	}
	return "", "", fmt.Errorf("image: %s not found in PATH or %s; install the Debian package %s (apt-get install %s)",
		t.name, strings.Join(toolDirs, ":"), t.pkg, strings.Fields(t.pkg)[0])
}

// Build assembles the tools image and writes it to outFile atomically (a
// temporary file in the same directory renamed over outFile on success).
func Build(outFile string, opt Options) (Manifest, error) {
	if outFile == "" {
		return Manifest{}, errors.New("image: no output file")
	}
	if opt.Tag == "" {
		opt.Tag = DefaultTag
	}
	tag, err := name.NewTag(opt.Tag)
	if err != nil {
		return Manifest{}, fmt.Errorf("image: bad tag %q: %w", opt.Tag, err)
	}
	switch opt.Format {
	case "":
		opt.Format = FormatDocker
	case FormatDocker, FormatOCI:
	default:
		return Manifest{}, fmt.Errorf("image: unknown format %q (want %q or %q)", opt.Format, FormatDocker, FormatOCI)
	}
	if opt.Self == "" {
		if opt.Self, err = os.Executable(); err != nil {
			return Manifest{}, fmt.Errorf("image: locating the cnibench binary: %w", err)
		}
	}
	if opt.Self, err = filepath.Abs(opt.Self); err != nil {
		return Manifest{}, fmt.Errorf("image: %w", err)
	}
	// Check the cheap things before reading any binary.
	for _, p := range append([]string{opt.Self}, opt.Extra...) {
		if !filepath.IsAbs(p) { // Self is absolute by now
			return Manifest{}, fmt.Errorf("image: extra binary %q: not an absolute path", p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return Manifest{}, fmt.Errorf("image: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return Manifest{}, fmt.Errorf("image: %s: not a regular file", p)
		}
	}
	type found struct{ tool, host, img string }
	var located []found
	var missing []string
	for _, t := range tools {
		host, img, err := lookupTool(t)
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		located = append(located, found{t.name, host, img})
	}
	if len(missing) > 0 {
		return Manifest{}, errors.New(strings.Join(missing, "\n"))
	}

	machine, err := elfMachine(runtime.GOARCH)
	if err != nil {
		return Manifest{}, err
	}
	fsys := newRootfs(machine)
	for _, f := range located {
		switch f.tool {
		case "busybox":
			if err := fsys.copyFile(BusyboxPath, f.host); err != nil {
				return Manifest{}, err
			}
			for _, a := range BusyboxApplets {
				if err := fsys.symlink("/bin/"+a, "busybox"); err != nil {
					return Manifest{}, err
				}
			}
		case "nginx":
			if err := fsys.copyFile(f.img, f.host); err != nil {
				return Manifest{}, err
			}
			bin, err := os.ReadFile(f.host)
			if err != nil {
				return Manifest{}, fmt.Errorf("image: %w", err)
			}
			if err := fsys.file(NginxConf, 0o644, nginxConf(bin)); err != nil {
				return Manifest{}, err
			}
		default:
			if err := fsys.copyFile(f.img, f.host); err != nil {
				return Manifest{}, err
			}
		}
	}
	if err := fsys.copyFile(SelfPath, opt.Self); err != nil {
		return Manifest{}, err
	}
	for _, p := range opt.Extra {
		if _, err := fsys.addHostPath(filepath.Clean(p)); err != nil {
			return Manifest{}, err
		}
	}
	for _, k := range nf.PodKinds() {
		for _, pattern := range k.PodFiles() {
			files, _ := filepath.Glob(pattern)
			if len(files) == 0 {
				return Manifest{}, fmt.Errorf("image: network function %s needs %s, which is not on this host (install the package of its tools: %s)", k.Name(), pattern, strings.Join(k.PodTools(), ", "))
			}
			for _, f := range files {
				if _, err := fsys.addHostPath(f); err != nil {
					return Manifest{}, err
				}
			}
		}
	}
	if err := addSkeleton(fsys); err != nil {
		return Manifest{}, err
	}
	if err := fsys.resolveLibraries(); err != nil {
		return Manifest{}, err
	}

	layerTar, man, err := fsys.tar()
	if err != nil {
		return Manifest{}, err
	}
	img, err := assemble(layerTar, opt.Format)
	if err != nil {
		return Manifest{}, err
	}
	if err := writeAtomic(outFile, func(w io.Writer) error {
		if opt.Format == FormatOCI {
			return writeOCI(w, tag, img)
		}
		return tarball.Write(tag, img, w)
	}); err != nil {
		return Manifest{}, err
	}
	return man, nil
}

// assemble turns the root filesystem tar into a single-layer image.
func assemble(layerTar []byte, format string) (v1.Image, error) {
	img := empty.Image
	layerType := types.DockerLayer
	if format == FormatOCI {
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(layerType))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: layerType,
		History:   v1.History{CreatedBy: "cnibench tools image", Comment: "host binaries and their shared libraries"},
	})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{}
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config.Cmd = append([]string(nil), Cmd...)
	cf.Config.Env = []string{"PATH=" + ImagePath}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "cnibench tools"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// writeOCI writes img as an OCI image layout into a temporary directory and
// tars that directory into w.
func writeOCI(w io.Writer, tag name.Tag, img v1.Image) error {
	dir, err := os.MkdirTemp("", "cnibench-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	full := tag.Name()
	if tag.RegistryStr() == name.DefaultRegistry {
		full = "docker.io/" + tag.RepositoryStr() + ":" + tag.TagStr()
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          full,
	})); err != nil {
		return err
	}
	return tarDir(w, dir)
}

// tarDir writes the tree under dir into w with deterministic order,
// ownership, modes and times.
func tarDir(w io.Writer, dir string) error {
	tw := newTarWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.dir(rel, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("unexpected file %s in OCI layout", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return tw.file(rel, 0o644, bytes.NewReader(data), int64(len(data)))
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeAtomic writes a file through a temporary sibling that is renamed over
// path only if write succeeds.
func writeAtomic(path string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("image: writing %s: %w", path, err)
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
