package scenario

import "testing"

// seenSource reads what busybox netstat -tn prints in the server (recorded here: an IPv4
// connection to an IPv6 socket shows as ::ffff:).
func TestSeenSource(t *testing.T) {
	out := []byte(`Active Internet connections (w/o servers)
Proto Recv-Q Send-Q Local Address           Foreign Address         State       
tcp        0      0 10.244.0.2:12865        10.244.0.1:51262        TIME_WAIT   
tcp        0      0 ::ffff:10.244.0.2:5201  ::ffff:172.30.0.254:41844 ESTABLISHED 
`)
	if got := seenSource(out, 5201); got != "172.30.0.254" {
		t.Errorf("port 5201: %q", got)
	}
	if got := seenSource(out, 12865); got != "10.244.0.1" {
		t.Errorf("port 12865: %q", got)
	}
	if got := seenSource(out, 80); got != "" {
		t.Errorf("port 80: %q", got)
	}
	two := append(out, []byte("tcp        0      0 10.244.0.2:5201  172.30.0.11:3333 ESTABLISHED\n")...)
	if got := seenSource(two, 5201); got != "" {
		t.Errorf("two sources: %q, want none", got)
	}
}
