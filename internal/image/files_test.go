package image

import (
	"strings"
	"testing"

	"github.com/cnibench/cnibench/internal/driver"
)

// TestNginxConfIsTheReplicas: the image's nginx.conf is the replicas' configuration (driver's)
// with the image's paths, and leaves out the temp path of a module the binary lacks.
func TestNginxConfIsTheReplicas(t *testing.T) {
	bin := []byte("\x7fELF...client_body_temp_path\x00proxy_temp_path\x00fastcgi_temp_path\x00scgi_temp_path\x00")
	conf := string(nginxConf(bin))
	for _, s := range []string{"proxy_temp_path        /tmp/nginx-proxy;", "scgi_temp_path         /tmp/nginx-scgi;", "listen 8080;", "root /srv;"} {
		if !strings.Contains(conf, s) {
			t.Errorf("nginx.conf lacks %q:\n%s", s, conf)
		}
	}
	for _, s := range []string{"uwsgi", "X-Replica"} {
		if strings.Contains(conf, s) {
			t.Errorf("nginx.conf has %q:\n%s", s, conf)
		}
	}
	// Every directive outside paths, names and the header comment is the replicas'.
	replica := string(driver.NginxConfig("/r", NginxPort, "r"))
	for _, l := range strings.Split(conf, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.Contains(l, "/") || strings.HasPrefix(l, "access_log") {
			continue
		}
		if !strings.Contains(replica, l) {
			t.Errorf("image directive %q is not in the replicas' configuration:\n%s", l, replica)
		}
	}
}
