package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var tmpRoot string // shared by the tests, removed by TestMain

func TestMain(m *testing.M) {
	var err error
	tmpRoot, err = os.MkdirTemp("", "cnibench-image-test-")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// needTools skips the test when the host lacks a tool the image needs.
func needTools(t *testing.T) {
	t.Helper()
	for _, tl := range tools {
		if _, _, err := lookupTool(tl); err != nil {
			t.Skip(err)
		}
	}
}

// fakeSelf is a small stand-in for the cnibench binary: a copy of true(1).
func fakeSelf(t *testing.T) string {
	t.Helper()
	src, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) on this host")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tmpRoot, "cnibench-fake")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	shared struct {
		once sync.Once
		out  string
		man  Manifest
		dur  time.Duration
		err  error
	}
)

// sharedBuild builds the docker-archive once for the tests that only read it.
func sharedBuild(t *testing.T) (string, Manifest) {
	t.Helper()
	needTools(t)
	self := fakeSelf(t)
	shared.once.Do(func() {
		shared.out = filepath.Join(tmpRoot, "tools.tar")
		start := time.Now()
		shared.man, shared.err = Build(shared.out, Options{Self: self})
		shared.dur = time.Since(start)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.out, shared.man
}

// layerEntry is one file of the extracted layer.
type layerEntry struct {
	hdr  *tar.Header
	data []byte
}

type layerFS map[string]layerEntry // keyed by absolute path

func readLayer(t *testing.T, img v1.Image) layerFS {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("image has %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fsys := layerFS{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fsys[path.Clean("/"+h.Name)] = layerEntry{h, data}
	}
	return fsys
}

// resolve follows symlinks inside the layer and returns the regular file
// p ends at, or "" if the chain is broken.
func (l layerFS) resolve(p string) string {
	for range 40 {
		e, ok := l[p]
		if !ok {
			return ""
		}
		switch e.hdr.Typeflag {
		case tar.TypeReg:
			return p
		case tar.TypeSymlink:
			if path.IsAbs(e.hdr.Linkname) {
				p = path.Clean(e.hdr.Linkname)
			} else {
				p = path.Join(path.Dir(p), e.hdr.Linkname)
			}
		default:
			return ""
		}
	}
	return ""
}

// loadable reports whether the loader finds lib in the layer's default
// library directories.
func (l layerFS) loadable(lib string) string {
	a, _ := elfMachine(runtime.GOARCH)
	for _, d := range a.libDirs() {
		if p := l.resolve(path.Join(d, lib)); p != "" {
			return p
		}
	}
	return ""
}

func TestToolsList(t *testing.T) {
	want := []string{"busybox", "curl", "iperf3", "iptables-restore", "iptables-save", "netperf", "netserver", "nginx", "taskset"}
	if got := Tools(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("Tools() = %v, want %v", got, want)
	}
}

func TestBuildDockerArchive(t *testing.T) {
	out, man := sharedBuild(t)
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("docker-archive %d bytes (%.1f MiB), %d paths, %.1f MiB uncompressed, built in %v",
		fi.Size(), float64(fi.Size())/(1<<20), len(man.Files), float64(man.Bytes)/(1<<20), shared.dur.Round(time.Millisecond))
	if !slices.IsSorted(man.Files) || man.Bytes <= 0 {
		t.Fatalf("bad manifest: sorted=%v bytes=%d", slices.IsSorted(man.Files), man.Bytes)
	}
	if left, err := filepath.Glob(filepath.Join(filepath.Dir(out), ".tools.tar.tmp-*")); err != nil || len(left) > 0 {
		t.Fatalf("temporary files left behind: %v %v", left, err)
	}

	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Cmd, []string{"/bin/busybox", "sleep", "infinity"}) {
		t.Errorf("Cmd = %q", cf.Config.Cmd)
	}
	if !slices.Contains(cf.Config.Env, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin") {
		t.Errorf("Env = %q", cf.Config.Env)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.IsZero() {
		t.Errorf("os/arch/created = %s/%s/%v", cf.OS, cf.Architecture, cf.Created)
	}

	// The tag is recorded for docker load / ctr import.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || !strings.HasSuffix(m[0].RepoTags[0], "cnibench/tools:latest") {
		t.Errorf("manifest.json RepoTags = %+v", m)
	}

	l := readLayer(t, img)
	for p := range l {
		if !slices.Contains(man.Files, p) {
			t.Errorf("layer has %s, not in Manifest.Files", p)
		}
	}
	if len(l) != len(man.Files) {
		t.Errorf("layer has %d entries, manifest %d", len(l), len(man.Files))
	}
	want := []string{"/bin/busybox", "/usr/local/bin/cnibench", "/etc/nginx/nginx.conf", "/etc/passwd", "/etc/group"}
	for _, tl := range tools {
		if tl.name == "busybox" {
			continue
		}
		_, img, err := lookupTool(tl)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, img)
	}
	for _, p := range want {
		e, ok := l[p]
		if !ok || e.hdr.Typeflag != tar.TypeReg {
			t.Errorf("%s missing or not a regular file", p)
			continue
		}
		if p != "/etc/nginx/nginx.conf" && !strings.HasPrefix(p, "/etc/") && e.hdr.Mode&0o111 == 0 {
			t.Errorf("%s not executable: %o", p, e.hdr.Mode)
		}
	}
	for _, a := range BusyboxApplets {
		if e := l["/bin/"+a]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "busybox" {
			t.Errorf("/bin/%s is not a symlink to busybox", a)
		}
	}
	if e := l["/tmp"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode != 0o1777 {
		t.Errorf("/tmp: %+v", e.hdr)
	}
	if e := l["/srv"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir {
		t.Errorf("/srv missing")
	}
	for p, e := range l {
		if !e.hdr.ModTime.Equal(time.Unix(0, 0)) || e.hdr.Uid != 0 || e.hdr.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d", p, e.hdr.ModTime, e.hdr.Uid, e.hdr.Gid)
		}
	}
	conf := string(l["/etc/nginx/nginx.conf"].data)
	for _, s := range []string{"daemon off;", "pid /tmp/nginx.pid;", "user root;", "worker_processes 1;", "listen 8080;", "root /srv;", "access_log off;", "client_body_temp_path  /tmp/"} {
		if !strings.Contains(conf, s) {
			t.Errorf("nginx.conf lacks %q:\n%s", s, conf)
		}
	}
	if !strings.Contains(string(l["/etc/passwd"].data), "root:x:0:0:") || !strings.Contains(string(l["/etc/passwd"].data), "nobody:") {
		t.Errorf("/etc/passwd: %q", l["/etc/passwd"].data)
	}

	// iperf3's interpreter, libc and libcrypto/libssl are in, at paths
	// the loader uses.
	iperf, _, err := lookupTool(tools[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(iperf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	needed, _ := f.ImportedLibraries()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(prog.Open())
			interp := string(bytes.TrimRight(b, "\x00"))
			if l.resolve(interp) == "" {
				t.Errorf("ELF interpreter %s missing", interp)
			}
		}
	}
	if len(needed) > 0 {
		if l.loadable("libc.so.6") == "" {
			t.Errorf("libc.so.6 missing")
		}
		for _, lib := range needed {
			if (strings.HasPrefix(lib, "libssl") || strings.HasPrefix(lib, "libcrypto")) && l.loadable(lib) == "" {
				t.Errorf("iperf3 needs %s, missing", lib)
			}
		}
	}

	// Every ELF object in the image finds all its libraries in it.
	for p, e := range l {
		if e.hdr.Typeflag != tar.TypeReg || !bytes.HasPrefix(e.data, []byte("\x7fELF")) {
			continue
		}
		ef, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		libs, err := ef.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, lib := range libs {
			if l.loadable(lib) == "" {
				t.Errorf("%s needs %s, not in the image", p, lib)
			}
		}
	}
}

func TestBuildDeterministic(t *testing.T) {
	first, _ := sharedBuild(t)
	second := filepath.Join(t.TempDir(), "again.tar")
	if _, err := Build(second, Options{Self: fakeSelf(t)}); err != nil {
		t.Fatal(err)
	}
	digest := func(p string) v1.Hash {
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d1, d2 := digest(first), digest(second)
	if d1 != d2 {
		t.Fatalf("digests differ: %s vs %s", d1, d2)
	}
	b1, _ := os.ReadFile(first)
	b2, _ := os.ReadFile(second)
	if !bytes.Equal(b1, b2) {
		t.Fatalf("archives differ byte-wise although digests match")
	}
	t.Logf("image digest %s", d1)
}

func TestBuildErrors(t *testing.T) {
	needTools(t)
	self := fakeSelf(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "x.tar")
	cases := []struct {
		name string
		opt  Options
		want string
	}{
		{"missing extra", Options{Self: self, Extra: []string{"/nonexistent/cnibench-tool"}}, "/nonexistent/cnibench-tool"},
		{"relative extra", Options{Self: self, Extra: []string{"bin/true"}}, "not an absolute path"},
		{"missing self", Options{Self: filepath.Join(dir, "nope")}, "nope"},
		{"bad format", Options{Self: self, Format: "zip"}, "unknown format"},
		{"bad tag", Options{Self: self, Tag: "UPPER/Case:tag"}, "bad tag"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Build(out, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, c.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("output written despite the error")
			}
		})
	}
}

func TestMissingToolNamesPackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := toolDirs
	toolDirs = nil
	defer func() { toolDirs = old }()
	_, err := Build(filepath.Join(t.TempDir(), "x.tar"), Options{Self: "/proc/self/exe"})
	if err == nil {
		t.Fatal("no error with no tools on the host")
	}
	for _, s := range []string{"iperf3 not found", "netperf (in the non-free component)", "nginx-light", "util-linux", "busybox-static", "apt-get install curl"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
}

// TestBuildOCI builds an OCI layout tarball with an extra binary reached
// through a symlink, and reads it back.
func TestBuildOCI(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	truePath, _ = filepath.EvalSymlinks(truePath)
	link := filepath.Join(dir, "bin", "mytrue")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(truePath, link); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tools-oci.tar")
	if _, err := Build(out, Options{Self: fakeSelf(t), Format: FormatOCI, Tag: "example.com/cni/tools:v1", Extra: []string{link}}); err != nil {
		t.Fatal(err)
	}
	ldir := filepath.Join(dir, "layout")
	untar(t, out, ldir)
	idx, err := layout.ImageIndexFromPath(ldir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d manifests", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.Annotations["io.containerd.image.name"] != "example.com/cni/tools:v1" || d.Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Errorf("annotations = %v", d.Annotations)
	}
	if d.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", d.MediaType)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	cf, _ := img.ConfigFile()
	if cf.Config.Cmd[0] != "/bin/busybox" {
		t.Errorf("Cmd = %q", cf.Config.Cmd)
	}
	l := readLayer(t, img)
	if e := l[link]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != truePath {
		t.Errorf("extra symlink %s not kept: %+v", link, e.hdr)
	}
	if l.resolve(link) != truePath {
		t.Errorf("extra %s does not resolve to %s in the image", link, truePath)
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extract(t, f, dir)
}

// extract unpacks a tar stream into dir.
func extract(t *testing.T, r io.Reader, dir string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			err = os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var w *os.File
			if w, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)); err == nil {
				_, err = io.Copy(w, tr)
				w.Close()
			}
		default:
			t.Fatalf("unexpected tar entry type %c for %s", h.Typeflag, h.Name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// TestChrootTools extracts the image and runs each tool inside it with
// chroot(8): this proves every shared library the tools need is present.
func TestChrootTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for chroot")
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		t.Skip("no chroot(8)")
	}
	out, _ := sharedBuild(t)
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	extract(t, rc, root)
	rc.Close()

	imgPath := func(name string) string {
		for _, tl := range tools {
			if tl.name == name {
				_, p, err := lookupTool(tl)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
		}
		t.Fatalf("no tool %s", name)
		return ""
	}
	run := func(t *testing.T, want string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chroot, append([]string{root}, args...)...)
		cmd.Env = []string{"PATH=" + ImagePath}
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		if !strings.Contains(string(b), want) {
			t.Fatalf("chroot %s: output lacks %q:\n%s", strings.Join(args, " "), want, b)
		}
	}
	cases := []struct {
		name, want string
		args       []string
	}{
		{"iperf3", "iperf", []string{imgPath("iperf3"), "--version"}},
		{"netperf", "Netperf version", []string{imgPath("netperf"), "-V"}},
		{"netserver", "Netperf version", []string{imgPath("netserver"), "-V"}},
		{"curl", "curl", []string{imgPath("curl"), "--version"}},
		{"nginx", "test is successful", []string{imgPath("nginx"), "-t", "-c", NginxConf}},
		{"taskset", "taskset", []string{imgPath("taskset"), "--version"}},
		{"sh", "ok", []string{"/bin/sh", "-c", "echo ok"}},
		{"busybox-path", "ok", []string{"/bin/sh", "-c", "true && env >/dev/null && ls /srv >/dev/null && mkdir /tmp/x && echo ok"}},
		{"cnibench", "", []string{SelfPath}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { run(t, c.want, c.args...) })
	}

	// The network functions that run in pods load their rules with the image's tools (in a new
	// network namespace: the host's rules stay as they are), plug-ins included.
	t.Run("iptables-rules", func(t *testing.T) {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare(1)")
		}
		rules := "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -s 10.0.0.1/32 -d 10.0.0.2/32 -p tcp --dport 5201 -j ACCEPT\n" +
			"-A FORWARD -s 198.18.0.1/32 -d 10.0.0.2/32 -p udp --sport 9 -j DROP\nCOMMIT\n"
		cmd := exec.Command(unshare, "--net", chroot, root, "/bin/sh", "-c", "iptables-restore && iptables-save -c -t filter")
		cmd.Env = []string{"PATH=" + ImagePath}
		cmd.Stdin = strings.NewReader(rules)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("iptables-restore in the image: %v\n%s", err, b)
		}
		for _, want := range []string{"--dport 5201 -j ACCEPT", "-m udp --sport 9 -j DROP", ":FORWARD DROP [0:0]"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("iptables-save in the image lacks %q:\n%s", want, b)
			}
		}
	})

	// nginx serves /srv on 8080 (skipped when the port is taken here).
	t.Run("nginx-serves", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:8080")
		if err != nil {
			t.Skip("port 8080 busy:", err)
		}
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, chroot, root, imgPath("nginx"), "-c", NginxConf)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}()
		var body []byte
		for i := 0; i < 50; i++ {
			resp, err := http.Get("http://127.0.0.1:8080/")
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if string(body) != "cnibench\n" {
			t.Fatalf("GET / = %q; nginx stderr:\n%s", body, stderr.String())
		}
		// and curl inside the image fetches it too
		run(t, "cnibench", imgPath("curl"), "-sS", "http://127.0.0.1:8080/")
	})
}
