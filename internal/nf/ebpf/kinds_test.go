package ebpf

import (
	"testing"

	"github.com/cnibench/cnibench/internal/nf/nftest"
)

func TestEBPFTC(t *testing.T)       { nftest.Check(t, nftest.Kind(t, "ebpf-tc")) }
func TestXDP(t *testing.T)          { nftest.Check(t, nftest.Kind(t, "xdp")) }
func TestEBPFRedirect(t *testing.T) { nftest.Check(t, nftest.Kind(t, "ebpf-redirect")) }
