package param

import (
	"slices"
	"testing"
)

// The built-in table: keys in id order, each label and id key once, values in range.
func TestTable(t *testing.T) {
	keys := Keys()
	if keys[0] != "services" || keys[len(keys)-1] != "fragment" || !slices.Contains(keys, "chain-length") {
		t.Errorf("keys %v", keys)
	}
	labels, ids := map[string]bool{}, map[string]bool{}
	for _, p := range All() {
		if labels[p.Label] || (p.ID != "" && ids[p.ID]) {
			t.Errorf("%s: label %q or id %q twice", p.Key, p.Label, p.ID)
		}
		labels[p.Label], ids[p.ID] = true, true
	}
	rep, _ := Lookup("replicas")
	if rep.Store(1) != 1 || rep.InID(1) || !rep.InID(2) || rep.LoadOf(3) != 2 {
		t.Errorf("replicas: store %d, in id 1 %v 2 %v, load of 3 %d", rep.Store(1), rep.InID(1), rep.InID(2), rep.LoadOf(3))
	}
	st, _ := Lookup("streams")
	if st.Store(1) != 0 || st.Shown(0) != 1 || st.InID(0) || !st.InID(4) || st.LoadOf(4) != 0 {
		t.Errorf("streams: one stream is stored as 0 and shown as 1, out of the id, no load")
	}
	if p, ok := ByLabel("chain_length"); !ok || p.Key != "chain-length" {
		t.Errorf("ByLabel(chain_length) = %+v %v", p, ok)
	}
}

// A new parameter without an order comes after the ordered ones; declaring it again the same
// way is a no-op, differently (or with a taken label or id key) a programming error.
func TestRegister(t *testing.T) {
	before := len(All())
	p := Param{Key: "test-depth", Label: "test_depth", Help: "h", Min: 1, Max: 9, ID: "tdepth"}
	Register(p)
	Register(p)
	all := All()
	if len(all) != before+1 || all[len(all)-1].Key != "test-depth" {
		t.Fatalf("after registering test-depth twice: %d params (was %d), last %s", len(all), before, all[len(all)-1].Key)
	}
	for name, bad := range map[string]Param{
		"other help":  {Key: "test-depth", Label: "test_depth", Help: "other", Min: 1, Max: 9, ID: "tdepth"},
		"taken label": {Key: "test-other", Label: "chain_length", Help: "h"},
		"taken id":    {Key: "test-other", Label: "test_other", Help: "h", ID: "svc"},
		"no label":    {Key: "test-other", Help: "h"},
		"bad range":   {Key: "test-other", Label: "test_other", Min: 5, Max: 1},
		"word load":   {Key: "test-other", Label: "test_other", Kind: Word, Load: true},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered without a panic", name)
				}
			}()
			Register(bad)
		}()
	}
}
