package image

import (
	"bytes"

	"github.com/cnibench/cnibench/internal/driver"
)

// addSkeleton adds the generated files and directories every image has.
func addSkeleton(r *rootfs) error {
	dirs := []struct {
		path string
		mode int64
	}{
		{"/tmp", 0o1777},
		{"/srv", 0o755},
		{"/root", 0o700},
		{"/etc", 0o755},
		{"/usr/local/bin", 0o755},
		{"/var/lib/nginx", 0o755}, // compiled-in temp path parent of some nginx builds
		{"/var/log/nginx", 0o755}, // compiled-in default error log of some nginx builds
		{"/proc", 0o555},
		{"/sys", 0o555},
		{"/dev", 0o755},
	}
	for _, d := range dirs {
		if err := r.dir(d.path, d.mode); err != nil {
			return err
		}
		// dir keeps an existing directory's mode; these modes matter.
		r.entries[d.path].mode = d.mode
	}
	files := []struct {
		path string
		mode int64
		data string
	}{
		{"/etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"/etc/group", 0o644, "root:x:0:\nnobody:x:65534:\nnogroup:x:65534:\n"},
		{"/etc/nsswitch.conf", 0o644, "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
		{"/etc/hosts", 0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{"/srv/index.html", 0o644, "cnibench\n"},
	}
	for _, f := range files {
		if err := r.file(f.path, f.mode, []byte(f.data)); err != nil {
			return err
		}
	}
	return nil
}

// nginxConf returns the image's nginx.conf: the replicas' nginx configuration (driver owns
// it) serving /srv on NginxPort, with the temp paths of the modules the nginx binary nginxBin
// was built with (nginx rejects a directive of a module it lacks).
func nginxConf(nginxBin []byte) []byte {
	return driver.NginxImageConfig("/srv", NginxPort, func(directive string) bool {
		return bytes.Contains(nginxBin, []byte(directive+"\x00"))
	})
}
