package l2probe

import (
	"encoding/binary"
	"testing"
)

func TestFrame(t *testing.T) {
	f, nonce := Frame()
	if len(f) != 60 {
		t.Fatalf("frame of %d bytes, want the Ethernet minimum 60", len(f))
	}
	if binary.BigEndian.Uint16(f[12:]) != 0x0806 || f[0] != 0xff || f[6]&0x03 != 0x02 {
		t.Errorf("not a broadcast ARP frame from a locally administered unicast address: % x", f[:14])
	}
	if got := [4]byte(f[28:32]); got != [4]byte{} {
		t.Errorf("sender protocol address %v, want 0.0.0.0 (a probe)", got)
	}
	if !IsProbe(f, nonce) {
		t.Error("IsProbe(frame, its nonce) = false")
	}
	other := nonce
	other[5] ^= 1
	if IsProbe(f, other) {
		t.Error("IsProbe(frame, another nonce) = true")
	}
	ip := append([]byte(nil), f...)
	binary.BigEndian.PutUint16(ip[12:], 0x0800)
	if IsProbe(ip, nonce) || IsProbe(f[:30], nonce) {
		t.Error("IsProbe accepts a non-ARP or short frame")
	}
}
