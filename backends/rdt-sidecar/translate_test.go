package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// skylake: 11 ways, at least 2 bits per mask, two L3 domains, MBA 10..100 by 10.
func skylake() *Limits {
	return &Limits{Path: "/sys/fs/resctrl", NumClosids: 16,
		CAT: true, CbmMask: 0x7ff, MinCbmBits: 2, L3Ids: []uint64{0, 1},
		MBA: true, MBMin: 10, MBGran: 10, MBIds: []uint64{0, 1}}
}

func spec(t *testing.T, js string) ClassSpec {
	t.Helper()
	var c ClassSpec
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return c
}

func TestDomainValuesJSON(t *testing.T) {
	c := spec(t, `{"l3": {"0": 240, "1": "0x7f0"}, "mb": 50}`)
	if c.L3.PerID[0] != 0xf0 || c.L3.PerID[1] != 0x7f0 || c.L3.All != nil {
		t.Errorf("l3 %+v", c.L3)
	}
	if c.MB.All == nil || *c.MB.All != 50 {
		t.Errorf("mb %+v", c.MB)
	}
	for _, bad := range []string{`{"l3": -1}`, `{"l3": {"x": 3}}`, `{"l3": "zz"}`, `{"mb": [50]}`} {
		var c ClassSpec
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestExpectedSchemata(t *testing.T) {
	lim := skylake()
	s := ExpectedSchemata(lim, spec(t, `{"l3": {"0": 240}, "mb": {"1": 50}}`))
	if got, want := s.String(), "L3:0=f0;1=7ff\nMB:0=100;1=50\n"; got != want {
		t.Errorf("schemata %q, want %q", got, want)
	}
	// No L3 and no MB asked: the whole cache and 100%, as goresctrl writes them.
	if got, want := ExpectedSchemata(lim, ClassSpec{}).String(), "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"; got != want {
		t.Errorf("defaults %q, want %q", got, want)
	}
	lim.CDP = true
	if got, want := ExpectedSchemata(lim, spec(t, `{"l3": 12}`)).String(),
		"L3CODE:0=c;1=c\nL3DATA:0=c;1=c\nMB:0=100;1=100\n"; got != want {
		t.Errorf("CDP %q, want %q", got, want)
	}
	lim.CDP, lim.MBA = false, false
	if got, want := ExpectedSchemata(lim, spec(t, `{"l3": 12}`)).String(), "L3:0=c;1=c\n"; got != want {
		t.Errorf("no MBA %q, want %q", got, want)
	}
}

func TestParseSchemataAndDiffers(t *testing.T) {
	got, err := ParseSchemata("    L3:0=0f0;1=7ff\n    MB:0= 50;1=100\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Schemata{"L3": {0: 0xf0, 1: 0x7ff}, "MB": {0: 50, 1: 100}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %v", got)
	}
	if d := want.Differs(got); len(d) != 0 {
		t.Errorf("differs %v", d)
	}
	asked := Schemata{"L3": {0: 0xf0, 1: 0x7f}, "MB": {0: 55, 1: 100}}
	if d := strings.Join(asked.Differs(got), ", "); d != "L3:1=7ff, not 7f, MB:0=50, not 55" {
		t.Errorf("differs %q", d)
	}
	for _, bad := range []string{"L3 0=f", "L3:0f", "L3:x=f", "L3:0=g", "MB:0=a"} {
		if _, err := ParseSchemata(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestValidateClass(t *testing.T) {
	cases := []struct {
		name, js, msg string
		lim           func(*Limits)
	}{
		{"ok", `{"l3": {"0": "0x7f0", "1": 3}, "mb": 50}`, "", nil},
		{"ok-defaults", `{}`, "", nil},
		{"non-contiguous", `{"l3": 5}`, "The mask 5 has non-consecutive 1-bits", nil},
		{"non-contiguous-one-domain", `{"l3": {"1": "0x606"}}`, "The mask 606 has non-consecutive 1-bits", nil},
		{"too-few-bits", `{"l3": 8}`, "Need at least 2 bits in the mask", nil},
		{"wider-than-cbm_mask", `{"l3": "0xfff"}`, "Mask out of range", nil},
		{"beyond-cbm_mask", `{"l3": "0x1800"}`, "Mask out of range", nil},
		{"empty-mask", `{"l3": 0}`, "Mask out of range", nil},
		{"unknown-l3-id", `{"l3": {"7": 3}}`, "unknown L3 cache id 7 (this host has 0,1)", nil},
		{"mb-below-min", `{"mb": 5}`, "MB value 5 out of range [10,100]", nil},
		{"mb-above-100", `{"mb": 110}`, "MB value 110 out of range [10,100]", nil},
		{"mb-granularity", `{"mb": {"0": 55}}`, "MB value 55 is not a multiple of bandwidth_gran 10", nil},
		{"mb-granularity-20", `{"mb": 30}`, "MB value 30 is not a multiple of bandwidth_gran 20",
			func(l *Limits) { l.MBMin, l.MBGran = 20, 20 }},
		{"unknown-mb-id", `{"mb": {"2": 50}}`, "unknown MB cache id 2 (this host has 0,1)", nil},
		{"no-mba", `{"mb": 50}`, "Unknown or unsupported resource name 'MB'", func(l *Limits) { l.MBA = false }},
		{"no-cat", `{"l3": 3}`, "Unknown or unsupported resource name 'L3'", func(l *Limits) { l.CAT = false }},
		{"exclusive-no-cat", `{"exclusive": true}`, "Unknown or unsupported resource name 'L3'", func(l *Limits) { l.CAT = false }},
		{"mbps", `{"mb": 50}`, "MB percentages are not available", func(l *Limits) { l.MBps = true }},
		{"min-bits-1", `{"l3": 1}`, "", func(l *Limits) { l.MinCbmBits = 1 }},
	}
	for _, c := range cases {
		lim := skylake()
		if c.lim != nil {
			c.lim(lim)
		}
		err := ValidateClass(lim, "c", spec(t, c.js))
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.msg != "" && err == nil:
			t.Errorf("%s: accepted", c.name)
		case c.msg != "" && (err.Msg != c.msg || err.Errno != syscall.EINVAL):
			t.Errorf("%s: %q (errno %d), want %q", c.name, err.Msg, err.Errno, c.msg)
		}
	}
	for _, bad := range []string{"", "-x", "a/b", "a b", "system/default", "..", strings.Repeat("x", 65)} {
		if err := ValidateClass(skylake(), bad, ClassSpec{}); err == nil {
			t.Errorf("class name %q accepted", bad)
		}
	}
}

func TestGoresctrlConfig(t *testing.T) {
	lim := skylake()
	conf, text, err := GoresctrlConfig(lim, map[string]ClassSpec{
		"hi": spec(t, `{"l3": {"0": 2032}, "mb": 50}`),
		"lo": spec(t, `{"l3": 15}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"partitions":{"colosim":{"classes":{` +
		`"hi":{"l3Allocation":{"0":"0x7f0","1":"0x7ff"},"mbAllocation":{"0":["50%"],"1":["50%"]}},` +
		`"lo":{"l3Allocation":{"0":"0xf","1":"0xf"},"mbAllocation":{"0":["100%"],"1":["100%"]}}},` +
		`"l3Allocation":"100%","mbAllocation":["100%"]}}}`
	if string(text) != want {
		t.Errorf("config\n%s\nwant\n%s", text, want)
	}
	p, ok := conf.Partitions["colosim"]
	if !ok || len(p.Classes) != 2 {
		t.Fatalf("partitions %+v", conf.Partitions)
	}
	if got := p.Classes["hi"].L3Allocation["0"].Unified; got != "0x7f0" {
		t.Errorf("hi L3 id 0: %q", got)
	}
	if got := p.Classes["hi"].MBAllocation["1"]; len(got) != 1 || got[0] != "50%" {
		t.Errorf("hi MB id 1: %v", got)
	}
	if _, ok := p.Classes["system/default"]; ok {
		t.Error("the root class must never be configured")
	}
	// No classes: an empty configuration (goresctrl then removes every group under the prefix).
	conf, text, err = GoresctrlConfig(lim, nil)
	if err != nil || string(text) != "{}" || len(conf.Partitions) != 0 {
		t.Errorf("empty: %s %v", text, err)
	}
	// MBps mounts: no MB allocation at all.
	lim.MBps = true
	_, text, _ = GoresctrlConfig(lim, map[string]ClassSpec{"x": {}})
	if strings.Contains(string(text), "mbAllocation") {
		t.Errorf("MBps: %s", text)
	}
}
