package result

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cnibench/cnibench/internal/param"
)

// A case parameter (internal/param) is stored in the Case field whose JSON key is its label
// when Case has one (the parameters declared before the table, read by name in their
// scenarios), else among the case's extra labels: written to JSON beside the fields, read back
// from it, compared and used as map keys as the fields are. Int, Word, SetInt and SetWord reach
// either.

// fields maps a JSON key of Case to its field index.
var fields = sync.OnceValue(func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeOf(Case{})
	for i := range t.NumField() {
		if tag := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]; tag != "" && tag != "-" {
			m[tag] = i
		}
	}
	return m
})

// Int is the value of Int parameter key (0 when unknown or unset).
func (c Case) Int(key string) int {
	p, ok := param.Lookup(key)
	if !ok {
		return 0
	}
	return c.intOf(p)
}

func (c Case) intOf(p param.Param) int {
	if i, ok := fields()[p.Label]; ok {
		return int(reflect.ValueOf(c).Field(i).Int())
	}
	v, _ := strconv.Atoi(c.extraOf(p.Label))
	return v
}

// Word is the value of Word parameter key ("" when unknown or unset).
func (c Case) Word(key string) string {
	p, ok := param.Lookup(key)
	if !ok {
		return ""
	}
	return c.wordOf(p)
}

func (c Case) wordOf(p param.Param) string {
	if i, ok := fields()[p.Label]; ok {
		return reflect.ValueOf(c).Field(i).String()
	}
	return c.extraOf(p.Label)
}

// Text is a parameter's value as text, "" when unset (an Int of 0).
func (c Case) Text(p param.Param) string {
	if p.Kind == param.Word {
		return c.wordOf(p)
	}
	if v := c.intOf(p); v != 0 {
		return strconv.Itoa(v)
	}
	return ""
}

// SetInt sets Int parameter key (a programming error when it is not one).
func (c *Case) SetInt(key string, v int) {
	p := mustLookup(key)
	if i, ok := fields()[p.Label]; ok {
		reflect.ValueOf(c).Elem().Field(i).SetInt(int64(v))
		return
	}
	s := ""
	if v != 0 {
		s = strconv.Itoa(v)
	}
	c.setExtra(p.Label, s)
}

// SetWord sets Word parameter key.
func (c *Case) SetWord(key, v string) {
	p := mustLookup(key)
	if i, ok := fields()[p.Label]; ok {
		reflect.ValueOf(c).Elem().Field(i).SetString(v)
		return
	}
	c.setExtra(p.Label, v)
}

func mustLookup(key string) param.Param {
	p, ok := param.Lookup(key)
	if !ok {
		panic("result: no case parameter " + key)
	}
	return p
}

// The extra labels are kept as one string, "label\x1fvalue" entries sorted by label and
// joined by "\x1e", so that a Case stays comparable.
const (
	extraSep = "\x1e"
	extraKV  = "\x1f"
)

func (c Case) extraOf(label string) string {
	for _, e := range strings.Split(c.extra, extraSep) {
		if k, v, ok := strings.Cut(e, extraKV); ok && k == label {
			return v
		}
	}
	return ""
}

func (c *Case) setExtra(label, v string) {
	m := c.extras()
	if v == "" {
		delete(m, label)
	} else {
		m[label] = v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+extraKV+m[k])
	}
	c.extra = strings.Join(parts, extraSep)
}

func (c Case) extras() map[string]string {
	m := map[string]string{}
	if c.extra == "" {
		return m
	}
	for _, e := range strings.Split(c.extra, extraSep) {
		if k, v, ok := strings.Cut(e, extraKV); ok {
			m[k] = v
		}
	}
	return m
}

// plainCase is Case without its methods, for the JSON encoding of its fields.
type plainCase Case

// MarshalJSON writes the case's fields and then its extra labels (ints as numbers).
func (c Case) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainCase(c))
	if err != nil || c.extra == "" {
		return b, err
	}
	buf := bytes.NewBuffer(b[:len(b)-1]) // without the closing brace
	m := c.extras()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kj, _ := json.Marshal(k)
		buf.WriteByte(',')
		buf.Write(kj)
		buf.WriteByte(':')
		if p, ok := param.ByLabel(k); ok && p.Kind == param.Int {
			buf.WriteString(m[k])
		} else {
			vj, _ := json.Marshal(m[k])
			buf.Write(vj)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the case's fields and the labels of declared parameters that have no
// field (other keys are left alone, as before).
func (c *Case) UnmarshalJSON(b []byte) error {
	var p plainCase
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = Case(p)
	var extra []param.Param
	for _, q := range param.All() {
		if _, ok := fields()[q.Label]; !ok {
			extra = append(extra, q)
		}
	}
	if len(extra) == 0 || !hasAnyKey(b, extra) {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, q := range extra {
		v, ok := raw[q.Label]
		if !ok {
			continue
		}
		if q.Kind == param.Int {
			var n int
			if err := json.Unmarshal(v, &n); err != nil {
				return err
			}
			c.SetInt(q.Key, n)
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		c.SetWord(q.Key, s)
	}
	return nil
}

// hasAnyKey tells cheaply whether b may hold one of the parameters' labels as a key.
func hasAnyKey(b []byte, ps []param.Param) bool {
	for _, p := range ps {
		if bytes.Contains(b, []byte(`"`+p.Label+`"`)) {
			return true
		}
	}
	return false
}
