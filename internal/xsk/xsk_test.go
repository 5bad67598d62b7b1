package xsk

import (
	"os"
	"testing"
)

// A socket gets the rings it asks for, of the sizes asked, and no other; Close and a
// program's Close are idempotent.
func TestOpenClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Usable(); err != nil {
		t.Skip(err)
	}
	umem, err := NewUMEM(64, 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeUMEM(umem)
	s, err := Open(Config{UMEM: umem, FrameSize: 2048, Rings: Rings{TX: 32, Fill: 8, Completion: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if s.RX != nil || s.TX == nil || s.TX.Size() != 32 || s.Fill.Size() != 8 || s.Completion.Size() != 64 {
		t.Errorf("rings RX %v, TX %v, fill %v, completion %v", s.RX, s.TX, s.Fill, s.Completion)
	}
	if s.TX.Pending() || s.Completion.Ready() != 0 {
		t.Error("a new socket's rings are not empty")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, udp4 := range []bool{false, true} {
		p, err := LoadProgram(udp4)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
}
