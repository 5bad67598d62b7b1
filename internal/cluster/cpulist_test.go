package cluster

import "testing"

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]string{"0-1": "0,1", "0": "0", "0-2,5,7-8\n": "0,1,2,5,7,8", "": ""} {
		got, err := ParseCPUList(in)
		if err != nil || FormatCPUList(got) != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "1-x", "-1"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
