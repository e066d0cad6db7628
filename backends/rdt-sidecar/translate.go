package main

// The configuration translation: colosim's class requests (an L3 CBM and an
// MB percent per cache id) -> checked against resctrl's info/ -> a goresctrl
// rdt.Config, and the schemata the kernel must then show for each class.

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/intel/goresctrl/pkg/rdt"
)

// Limits is what resctrl's info/ (and the root schemata) says classes may use.
type Limits struct {
	Path       string   `json:"path"`
	MountOpts  []string `json:"mount_options"`
	NumClosids int      `json:"num_closids"` // the minimum over the resources, root's included

	CAT           bool     `json:"-"`
	CDP           bool     `json:"-"` // L3CODE/L3DATA instead of L3
	CbmMask       uint64   `json:"-"`
	MinCbmBits    int      `json:"-"`
	ShareableBits uint64   `json:"-"`
	L3Ids         []uint64 `json:"-"`

	MBA    bool     `json:"-"`
	MBMin  int      `json:"-"`
	MBGran int      `json:"-"`
	MBps   bool     `json:"-"` // mounted with -o mba_MBps: MB values are MBps
	MBIds  []uint64 `json:"-"`

	Mon         bool     `json:"-"`
	MonFeatures []string `json:"-"`
	NumRmids    int      `json:"-"`
}

// Ways is the number of bits in info/L3/cbm_mask.
func (l *Limits) Ways() int { return bits.OnesCount64(l.CbmMask) }

// DomainValues is one value for every domain (a JSON number) or values per
// cache id (a JSON object {"0": 255, "1": "0xff0"}); numbers may also be
// strings in Go syntax ("0xff0").  Ids missing from an object keep the
// default (the full mask, 100% MB).
type DomainValues struct {
	All   *uint64
	PerID map[uint64]uint64
}

func parseValue(raw json.RawMessage) (uint64, error) {
	var n uint64
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s is not a non-negative integer", raw)
	}
	return strconv.ParseUint(strings.TrimSpace(s), 0, 64)
}

func (d *DomainValues) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err == nil {
		d.PerID = map[uint64]uint64{}
		for k, raw := range obj {
			id, err := strconv.ParseUint(k, 10, 32)
			if err != nil {
				return fmt.Errorf("cache id %q is not a number", k)
			}
			v, err := parseValue(raw)
			if err != nil {
				return fmt.Errorf("cache id %s: %v", k, err)
			}
			d.PerID[id] = v
		}
		return nil
	}
	v, err := parseValue(b)
	if err != nil {
		return err
	}
	d.All = &v
	return nil
}

func (d *DomainValues) MarshalJSON() ([]byte, error) {
	if d.All != nil {
		return json.Marshal(*d.All)
	}
	m := map[string]uint64{}
	for id, v := range d.PerID {
		m[strconv.FormatUint(id, 10)] = v
	}
	return json.Marshal(m)
}

// value for cache id, or def.
func (d *DomainValues) value(id uint64, def uint64) uint64 {
	if d == nil {
		return def
	}
	if d.All != nil {
		return *d.All
	}
	if v, ok := d.PerID[id]; ok {
		return v
	}
	return def
}

// ClassSpec is one class of a configure request.
type ClassSpec struct {
	L3        *DomainValues `json:"l3,omitempty"`        // CBMs; default: the full mask
	MB        *DomainValues `json:"mb,omitempty"`        // percent; default: 100
	Exclusive bool          `json:"exclusive,omitempty"` // resctrl mode "exclusive"
}

// opError is a failed request: errno (for Python's OSError), the message in
// resctrl's own wording where there is one, and what else helps.
type opError struct {
	Errno  syscall.Errno
	Msg    string
	Detail string
}

func (e *opError) Error() string {
	if e.Detail != "" {
		return e.Msg + " (" + e.Detail + ")"
	}
	return e.Msg
}

func einval(detail, f string, a ...any) *opError {
	return &opError{Errno: syscall.EINVAL, Msg: fmt.Sprintf(f, a...), Detail: detail}
}

var classNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$`)

func idList(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

func checkIDs(res string, d *DomainValues, known []uint64) *opError {
	if d == nil || d.PerID == nil {
		return nil
	}
	for id := range d.PerID {
		found := false
		for _, k := range known {
			found = found || k == id
		}
		if !found {
			return einval("", "unknown %s cache id %d (this host has %s)", res, id, idList(known))
		}
	}
	return nil
}

// checkCbm is the kernel's cbm_validate (Intel: contiguous masks), with its
// messages, against info/L3/cbm_mask and min_cbm_bits.
func checkCbm(lim *Limits, cbm uint64) *opError {
	if cbm == 0 || cbm&^lim.CbmMask != 0 {
		return einval(fmt.Sprintf("mask %#x is not within info/L3/cbm_mask %x", cbm, lim.CbmMask), "Mask out of range")
	}
	first := bits.TrailingZeros64(cbm)
	run := bits.TrailingZeros64(^(cbm >> uint(first)))
	if cbm>>uint(first+run) != 0 {
		return einval("", "The mask %x has non-consecutive 1-bits", cbm)
	}
	if run < lim.MinCbmBits {
		return einval(fmt.Sprintf("mask %#x has %d", cbm, run), "Need at least %d bits in the mask", lim.MinCbmBits)
	}
	return nil
}

// checkMB: within [info/MB/min_bandwidth, 100] (the kernel's message) and a
// multiple of info/MB/bandwidth_gran (the kernel would round it up; we
// refuse rather than program something else than was asked).
func checkMB(lim *Limits, mb uint64) *opError {
	if mb < uint64(lim.MBMin) || mb > 100 {
		return einval("", "MB value %d out of range [%d,%d]", mb, lim.MBMin, 100)
	}
	if lim.MBGran > 0 && mb%uint64(lim.MBGran) != 0 {
		up := (mb + uint64(lim.MBGran) - 1) / uint64(lim.MBGran) * uint64(lim.MBGran)
		return einval(fmt.Sprintf("the kernel would round it up to %d", up),
			"MB value %d is not a multiple of bandwidth_gran %d", mb, lim.MBGran)
	}
	return nil
}

// ValidateClass checks one class against the host's limits.
func ValidateClass(lim *Limits, name string, c ClassSpec) *opError {
	if !classNameRE.MatchString(name) {
		return einval("", "bad class name %q: letters, digits and _.:+- only, at most 64, not starting with a punctuation mark", name)
	}
	if c.L3 != nil || c.Exclusive {
		if !lim.CAT {
			return einval("this host has no L3 cache allocation (info/L3 is missing)", "Unknown or unsupported resource name 'L3'")
		}
	}
	if lim.CAT {
		if err := checkIDs("L3", c.L3, lim.L3Ids); err != nil {
			return err
		}
		for _, id := range lim.L3Ids {
			if err := checkCbm(lim, c.L3.value(id, lim.CbmMask)); err != nil {
				err.Detail = joinDetail(fmt.Sprintf("class %s, L3 cache id %d", name, id), err.Detail)
				return err
			}
		}
	}
	if c.MB != nil {
		if !lim.MBA {
			return einval("this host has no memory bandwidth allocation (info/MB is missing)", "Unknown or unsupported resource name 'MB'")
		}
		if lim.MBps {
			return einval("resctrl is mounted with -o mba_MBps, so MB values are MBps, not percent", "MB percentages are not available")
		}
		if err := checkIDs("MB", c.MB, lim.MBIds); err != nil {
			return err
		}
		for _, id := range lim.MBIds {
			if err := checkMB(lim, c.MB.value(id, 100)); err != nil {
				err.Detail = joinDetail(fmt.Sprintf("class %s, MB domain %d", name, id), err.Detail)
				return err
			}
		}
	}
	return nil
}

func joinDetail(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

const partitionName = "colosim"

// GoresctrlConfig translates validated classes into goresctrl's
// configuration: one partition with the whole cache and bandwidth, and per
// class an absolute CBM (relative to the partition mask, whose lowest bit
// is bit 0, so absolute) and MB percent for every cache id.  The root class
// (system/default) is never part of it, so goresctrl leaves it alone.
func GoresctrlConfig(lim *Limits, classes map[string]ClassSpec) (*rdt.Config, []byte, error) {
	type classJSON struct {
		L3 map[string]string   `json:"l3Allocation,omitempty"`
		MB map[string][]string `json:"mbAllocation,omitempty"`
	}
	part := map[string]any{}
	cls := map[string]classJSON{}
	if lim.CAT {
		part["l3Allocation"] = "100%"
	}
	if lim.MBA && !lim.MBps {
		part["mbAllocation"] = []string{"100%"}
	}
	for name, c := range classes {
		var cj classJSON
		if lim.CAT {
			cj.L3 = map[string]string{}
			for _, id := range lim.L3Ids {
				cj.L3[strconv.FormatUint(id, 10)] = fmt.Sprintf("%#x", c.L3.value(id, lim.CbmMask))
			}
		}
		if lim.MBA && !lim.MBps {
			cj.MB = map[string][]string{}
			for _, id := range lim.MBIds {
				cj.MB[strconv.FormatUint(id, 10)] = []string{fmt.Sprintf("%d%%", c.MB.value(id, 100))}
			}
		}
		cls[name] = cj
	}
	part["classes"] = cls
	doc := map[string]any{"partitions": map[string]any{partitionName: part}}
	if len(classes) == 0 {
		doc = map[string]any{}
	}
	text, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	var conf rdt.Config
	if err := json.Unmarshal(text, &conf); err != nil {
		return nil, text, fmt.Errorf("BUG: goresctrl rejects the generated configuration %s: %v", text, err)
	}
	return &conf, text, nil
}

// Schemata is a parsed schemata file: resource -> cache id -> value.
type Schemata map[string]map[uint64]uint64

// ExpectedSchemata is what the class's schemata file must show.
func ExpectedSchemata(lim *Limits, c ClassSpec) Schemata {
	s := Schemata{}
	if lim.CAT {
		l3 := map[uint64]uint64{}
		for _, id := range lim.L3Ids {
			l3[id] = c.L3.value(id, lim.CbmMask)
		}
		if lim.CDP {
			s["L3CODE"], s["L3DATA"] = l3, l3
		} else {
			s["L3"] = l3
		}
	}
	if lim.MBA && !lim.MBps {
		mb := map[uint64]uint64{}
		for _, id := range lim.MBIds {
			mb[id] = c.MB.value(id, 100)
		}
		s["MB"] = mb
	}
	return s
}

// String is the schemata text as a write would give it ("L3:0=ff;1=7ff").
func (s Schemata) String() string {
	order := []string{"L3", "L3CODE", "L3DATA", "MB"}
	var b strings.Builder
	for _, res := range order {
		vals, ok := s[res]
		if !ok {
			continue
		}
		ids := make([]uint64, 0, len(vals))
		for id := range vals {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		b.WriteString(res + ":")
		for i, id := range ids {
			if i > 0 {
				b.WriteString(";")
			}
			if res == "MB" {
				fmt.Fprintf(&b, "%d=%d", id, vals[id])
			} else {
				fmt.Fprintf(&b, "%d=%x", id, vals[id])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ParseSchemata reads a schemata file as the kernel prints it (resource
// names may be right-aligned with spaces; masks hex, MB decimal).  Other
// resources (L2, SMBA, ...) are kept too.
func ParseSchemata(text string) (Schemata, error) {
	s := Schemata{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		res, vals, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("schemata line %q has no ':'", line)
		}
		res = strings.TrimSpace(res)
		base := 16
		if res == "MB" || res == "SMBA" {
			base = 10
		}
		m := map[uint64]uint64{}
		for _, dv := range strings.Split(vals, ";") {
			id, v, ok := strings.Cut(dv, "=")
			if !ok {
				return nil, fmt.Errorf("schemata entry %q has no '='", dv)
			}
			i, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("schemata entry %q: %v", dv, err)
			}
			x, err := strconv.ParseUint(strings.TrimSpace(v), base, 64)
			if err != nil {
				return nil, fmt.Errorf("schemata entry %q: %v", dv, err)
			}
			m[i] = x
		}
		s[res] = m
	}
	return s, nil
}

// Differs lists where got does not show what want asks for.
func (want Schemata) Differs(got Schemata) []string {
	var diffs []string
	for res, vals := range want {
		for id, v := range vals {
			g, ok := got[res][id]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s:%d missing", res, id))
			case g != v && res == "MB":
				diffs = append(diffs, fmt.Sprintf("%s:%d=%d, not %d", res, id, g, v))
			case g != v:
				diffs = append(diffs, fmt.Sprintf("%s:%d=%x, not %x", res, id, g, v))
			}
		}
	}
	sort.Strings(diffs)
	return diffs
}
