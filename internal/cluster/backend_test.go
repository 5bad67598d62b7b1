package cluster

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ", nil},
		{"tcp", []string{"tcp"}},
		{"tcp, udp", []string{"tcp", "udp"}},
		{" tcp,,udp ,", []string{"tcp", "udp"}},
		{"[tcp,udp]", []string{"tcp", "udp"}},
	}
	for _, tt := range tests {
		if got := ParseList(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseList(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestBadInputIsErrBadInputWithItsMessageAlone(t *testing.T) {
	err := BadInput("--x %d: out of range", 3)
	if !errors.Is(err, ErrBadInput) || err.Error() != "--x 3: out of range" {
		t.Errorf("BadInput = %q (is ErrBadInput: %v)", err, errors.Is(err, ErrBadInput))
	}
	if wrapped := fmt.Errorf("case a: %w", err); !errors.Is(wrapped, ErrBadInput) {
		t.Error("a wrapped BadInput is not ErrBadInput")
	}
	if errors.Is(Unsupported("no"), ErrBadInput) {
		t.Error("Unsupported is ErrBadInput")
	}
}

func TestBackendNamedListsTheRegistered(t *testing.T) {
	_, err := BackendNamed("nosuch")
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), `unknown backend "nosuch" (valid: `) {
		t.Errorf("BackendNamed(nosuch) = %v", err)
	}
}
