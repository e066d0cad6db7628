// Package kernel emulates the Linux resctrl filesystem's semantics (Intel
// CAT on L3, MBA in percent, CMT/MBM monitoring) for testing the RDT sidecar
// on hosts without RDT hardware.  It is the state machine behind the FUSE
// filesystem of ../main.go: every operation takes a path relative to the
// mount point and returns a syscall.Errno, and the message the kernel would
// put in info/last_cmd_status.
//
// Re-implemented from the kernel's behaviour as found in fs/resctrl/
// (ctrlmondata.c: rdtgroup_schemata_write, parse_line, parse_cbm,
// cbm_validate, bw_validate; rdtgroup.c: rdtgroup_mkdir_ctrl_mon,
// __init_one_rdt_domain, rdtgroup_tasks_write, rdtgroup_rmdir_ctrl,
// rdtgroup_mode_write, show_doms) and Documentation/arch/x86/resctrl.rst.
// The messages are the kernel's.  What it cannot do is listed in
// ../../README.md ("Emulated resctrl: what is real").
package kernel

import (
	"fmt"
	"math/bits"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Config is the emulated hardware: what info/ shows.
type Config struct {
	CbmLen        int      `json:"cbm_len"`        // L3 CBM bits (ways); 0: no L3 CAT
	MinCbmBits    int      `json:"min_cbm_bits"`   // info/L3/min_cbm_bits
	ShareableBits uint64   `json:"shareable_bits"` // info/L3/shareable_bits
	NumClosids    int      `json:"num_closids"`    // per resource (L3 and MB alike)
	Domains       []int    `json:"domains"`        // L3 cache ids (MB domains are the same)
	CDPCapable    bool     `json:"cdp_capable"`    // pads resource names to "L3CODE" width, as the kernel does
	MBMin         int      `json:"mb_min"`         // info/MB/min_bandwidth; 0: no MBA
	MBGran        int      `json:"mb_gran"`        // info/MB/bandwidth_gran
	NumRmids      int      `json:"num_rmids"`      // info/L3_MON/num_rmids; 0: no monitoring
	MonFeatures   []string `json:"mon_features"`   // info/L3_MON/mon_features
	LLCBytes      int64    `json:"llc_bytes"`      // per domain, for the size files
	NumCPUs       int      `json:"num_cpus"`       // for cpus / cpus_list of the root group
}

// DefaultConfig is a two-socket Skylake-SP-like host: 11 ways, 16 CLOSIDs,
// MBA 10..100 in steps of 10, CMT and MBM.
func DefaultConfig() Config {
	return Config{CbmLen: 11, MinCbmBits: 1, NumClosids: 16, Domains: []int{0, 1}, CDPCapable: true,
		MBMin: 10, MBGran: 10, NumRmids: 176,
		MonFeatures: []string{"llc_occupancy", "mbm_total_bytes", "mbm_local_bytes"},
		LLCBytes:    11 * 1441792, NumCPUs: 4}
}

// Validate rejects configurations the kernel could not present.
func (c Config) Validate() error {
	if c.CbmLen < 0 || c.CbmLen > 32 {
		return fmt.Errorf("cbm_len %d: must be 0..32", c.CbmLen)
	}
	if c.CbmLen > 0 && (c.MinCbmBits < 0 || c.MinCbmBits > c.CbmLen) {
		return fmt.Errorf("min_cbm_bits %d: must be 0..cbm_len", c.MinCbmBits)
	}
	if c.hasAlloc() && c.NumClosids < 1 {
		return fmt.Errorf("num_closids %d: must be >= 1", c.NumClosids)
	}
	if c.MBMin > 0 && (c.MBGran < 1 || c.MBMin > 100) {
		return fmt.Errorf("mb_min %d / mb_gran %d: need 1 <= mb_min <= 100 and mb_gran >= 1", c.MBMin, c.MBGran)
	}
	if len(c.Domains) == 0 {
		return fmt.Errorf("no domains")
	}
	return nil
}

func (c Config) hasCAT() bool   { return c.CbmLen > 0 }
func (c Config) hasMBA() bool   { return c.MBMin > 0 }
func (c Config) hasMon() bool   { return c.NumRmids > 0 && len(c.MonFeatures) > 0 }
func (c Config) hasAlloc() bool { return c.hasCAT() || c.hasMBA() }
func (c Config) cbmMask() uint64 {
	return (uint64(1) << uint(c.CbmLen)) - 1
}

// Procs is where the emulation learns which tasks exist.
type Procs interface {
	Exists(tid int) bool
	AllTids() []int
}

// HostProcs reads /proc: the emulated kernel sees the host's tasks.
type HostProcs struct{}

func (HostProcs) Exists(tid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(tid))
	return err == nil
}

func (HostProcs) AllTids() []int {
	var tids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ts, _ := os.ReadDir("/proc/" + e.Name() + "/task")
		for _, t := range ts {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				tids = append(tids, tid)
			}
		}
	}
	return tids
}

// Counters supplies monitoring values: group ("" is the root group) and
// L3 domain -> event -> value.  Nil or a missing value reads as 0.
type Counters func(group string, domain int) map[string]uint64

type group struct {
	name   string // "" for the root group
	closid int
	rmid   int
	mode   string
	l3     map[int]uint64
	mb     map[int]int
}

// Kernel is one mounted resctrl filesystem.
type Kernel struct {
	mu       sync.Mutex
	cfg      Config
	groups   map[string]*group
	owner    map[int]string // tid -> group name, for tasks not in the root group
	lastCmd  strings.Builder
	procs    Procs
	counters Counters
}

// New mounts a fresh emulated resctrl: only the root group, with every CBM
// bit and 100% MB on every domain.
func New(cfg Config, procs Procs, counters Counters) (*Kernel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if procs == nil {
		procs = HostProcs{}
	}
	k := &Kernel{cfg: cfg, groups: map[string]*group{}, owner: map[int]string{}, procs: procs, counters: counters}
	root := &group{name: "", mode: "shareable", l3: map[int]uint64{}, mb: map[int]int{}}
	for _, d := range cfg.Domains {
		if cfg.hasCAT() {
			root.l3[d] = cfg.cbmMask()
		}
		if cfg.hasMBA() {
			root.mb[d] = 100
		}
	}
	k.groups[""] = root
	return k, nil
}

// ---- last_cmd_status -------------------------------------------------------

func (k *Kernel) clearCmd()               { k.lastCmd.Reset() }
func (k *Kernel) cmdf(f string, a ...any) { fmt.Fprintf(&k.lastCmd, f, a...) }
func (k *Kernel) fail(e syscall.Errno, f string, a ...any) syscall.Errno {
	k.cmdf(f, a...)
	return e
}

// LastCmdStatus is info/last_cmd_status.
func (k *Kernel) LastCmdStatus() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastCmdLocked()
}

func (k *Kernel) lastCmdLocked() string {
	if k.lastCmd.Len() == 0 {
		return "ok\n"
	}
	return k.lastCmd.String()
}

// ---- the tree ----------------------------------------------------------------

// Entry is one directory entry.
type Entry struct {
	Name string
	Dir  bool
	Mode uint32 // permission bits
}

var groupFiles = []Entry{{"cpus", false, 0644}, {"cpus_list", false, 0644}, {"mode", false, 0644},
	{"schemata", false, 0644}, {"size", false, 0444}, {"tasks", false, 0644}}

func (k *Kernel) groupEntries() []Entry {
	es := append([]Entry{}, groupFiles...)
	if k.cfg.hasMon() {
		es = append(es, Entry{"mon_data", true, 0555}, Entry{"mon_groups", true, 0755})
	}
	return es
}

func (k *Kernel) infoTree() map[string][]Entry {
	t := map[string][]Entry{"info": {{"last_cmd_status", false, 0444}}}
	if k.cfg.hasCAT() {
		t["info"] = append(t["info"], Entry{"L3", true, 0555})
		t["info/L3"] = []Entry{{"bit_usage", false, 0444}, {"cbm_mask", false, 0444},
			{"min_cbm_bits", false, 0444}, {"num_closids", false, 0444},
			{"shareable_bits", false, 0444}, {"sparse_masks", false, 0444}}
	}
	if k.cfg.hasMBA() {
		t["info"] = append(t["info"], Entry{"MB", true, 0555})
		t["info/MB"] = []Entry{{"bandwidth_gran", false, 0444}, {"delay_linear", false, 0444},
			{"min_bandwidth", false, 0444}, {"num_closids", false, 0444},
			{"thread_throttle_mode", false, 0444}}
	}
	if k.cfg.hasMon() {
		t["info"] = append(t["info"], Entry{"L3_MON", true, 0555})
		t["info/L3_MON"] = []Entry{{"max_threshold_occupancy", false, 0644},
			{"mon_features", false, 0444}, {"num_rmids", false, 0444}}
	}
	return t
}

// resolve splits a path into (group, rest) when it is inside a group
// ("" for the root group's own files), or reports it is under info/.
func (k *Kernel) resolve(p string) (g *group, rest string, info bool) {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "info" || strings.HasPrefix(p, "info/") {
		return nil, p, true
	}
	first, tail, _ := strings.Cut(p, "/")
	if gr, ok := k.groups[first]; ok && first != "" {
		return gr, tail, false
	}
	return k.groups[""], p, false
}

func monDir(d int) string { return fmt.Sprintf("mon_L3_%02d", d) }

// List returns a directory's entries, or ENOTDIR / ENOENT.
func (k *Kernel) List(p string) ([]Entry, syscall.Errno) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.listLocked(p)
}

func (k *Kernel) listLocked(p string) ([]Entry, syscall.Errno) {
	g, rest, info := k.resolve(p)
	if info {
		if es, ok := k.infoTree()[rest]; ok {
			return es, 0
		}
		return nil, k.notDirOrMissing(p)
	}
	switch {
	case rest == "":
		es := k.groupEntries()
		if g.name == "" {
			es = append(es, Entry{"info", true, 0555})
			names := make([]string, 0, len(k.groups))
			for n := range k.groups {
				if n != "" {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			for _, n := range names {
				es = append(es, Entry{n, true, 0755})
			}
		}
		return es, 0
	case rest == "mon_data" && k.cfg.hasMon():
		var es []Entry
		for _, d := range k.cfg.Domains {
			es = append(es, Entry{monDir(d), true, 0555})
		}
		return es, 0
	case rest == "mon_groups" && k.cfg.hasMon():
		return nil, 0
	case strings.HasPrefix(rest, "mon_data/") && k.cfg.hasMon():
		for _, d := range k.cfg.Domains {
			if rest == "mon_data/"+monDir(d) {
				var es []Entry
				for _, f := range k.cfg.MonFeatures {
					es = append(es, Entry{f, false, 0444})
				}
				return es, 0
			}
		}
	}
	return nil, k.notDirOrMissing(p)
}

func (k *Kernel) notDirOrMissing(p string) syscall.Errno {
	if e, ok := k.statLocked(p); ok && !e.Dir {
		return syscall.ENOTDIR
	}
	return syscall.ENOENT
}

// Stat looks a path up: its entry and whether it exists.
func (k *Kernel) Stat(p string) (Entry, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.statLocked(p)
}

func (k *Kernel) statLocked(p string) (Entry, bool) {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return Entry{"", true, 0755}, true
	}
	parent, name := path.Split(p)
	es, errno := k.listLocked(strings.TrimSuffix(parent, "/"))
	if errno != 0 {
		return Entry{}, false
	}
	for _, e := range es {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// ---- groups ------------------------------------------------------------------

func (k *Kernel) numClosids() int {
	// The kernel uses the minimum over the enabled resources; both use cfg.NumClosids here.
	return k.cfg.NumClosids
}

// Mkdir creates a CTRL_MON group at the top level (rdtgroup_mkdir_ctrl_mon).
func (k *Kernel) Mkdir(parent, name string) syscall.Errno {
	k.mu.Lock()
	defer k.mu.Unlock()
	parent = strings.Trim(path.Clean("/"+parent), "/")
	if strings.Contains(name, "\n") {
		return syscall.EINVAL
	}
	if _, ok := k.statLocked(path.Join(parent, name)); ok {
		return syscall.EEXIST
	}
	if parent != "" {
		if g, rest, info := k.resolve(parent); !info && rest == "mon_groups" && k.cfg.hasMon() {
			_ = g
			k.clearCmd()
			return k.fail(syscall.EOPNOTSUPP, "MON groups are not emulated\n")
		}
		return syscall.EPERM
	}
	if !k.cfg.hasAlloc() {
		return syscall.EPERM
	}
	k.clearCmd()
	used := map[int]bool{}
	usedRmid := map[int]bool{}
	for _, g := range k.groups {
		used[g.closid] = true
		usedRmid[g.rmid] = true
	}
	closid := -1
	for c := 0; c < k.numClosids(); c++ {
		if !used[c] {
			closid = c
			break
		}
	}
	if closid < 0 {
		return k.fail(syscall.ENOSPC, "Out of CLOSIDs\n")
	}
	rmid := 0
	if k.cfg.hasMon() {
		rmid = -1
		for r := 1; r < k.cfg.NumRmids; r++ {
			if !usedRmid[r] {
				rmid = r
				break
			}
		}
		if rmid < 0 {
			return k.fail(syscall.ENOSPC, "Out of RMIDs\n")
		}
	}
	g := &group{name: name, closid: closid, rmid: rmid, mode: "shareable", l3: map[int]uint64{}, mb: map[int]int{}}
	for _, d := range k.cfg.Domains {
		if k.cfg.hasCAT() {
			cbm, errno := k.initDomain(d)
			if errno != 0 {
				return errno
			}
			g.l3[d] = cbm
		}
		if k.cfg.hasMBA() {
			g.mb[d] = 100
		}
	}
	k.groups[name] = g
	return 0
}

// initDomain is __init_one_rdt_domain: a new group starts with every bit that
// is unused or used by shareable groups (and the hardware's shareable bits),
// cut to its lowest contiguous run.
func (k *Kernel) initDomain(d int) (uint64, syscall.Errno) {
	newCtrl := k.cfg.ShareableBits
	used := k.cfg.ShareableBits
	for _, g := range k.groups {
		used |= g.l3[d]
		if g.mode == "shareable" {
			newCtrl |= g.l3[d]
		}
	}
	newCtrl |= ^used & k.cfg.cbmMask()
	newCtrl = lowestRun(newCtrl, k.cfg.CbmLen)
	if bits.OnesCount64(newCtrl) < k.cfg.MinCbmBits {
		return 0, k.fail(syscall.ENOSPC, "No space on L3:%d\n", d)
	}
	return newCtrl, 0
}

func lowestRun(v uint64, n int) uint64 {
	if v == 0 {
		return 0
	}
	first := bits.TrailingZeros64(v)
	zero := first
	for zero < n && v&(1<<uint(zero)) != 0 {
		zero++
	}
	return v & ((uint64(1) << uint(zero)) - 1)
}

// Rmdir removes a CTRL_MON group; its tasks go back to the root group.
func (k *Kernel) Rmdir(p string) syscall.Errno {
	k.mu.Lock()
	defer k.mu.Unlock()
	p = strings.Trim(path.Clean("/"+p), "/")
	g, ok := k.groups[p]
	if !ok || p == "" {
		if _, exists := k.statLocked(p); !exists {
			return syscall.ENOENT
		}
		return syscall.EPERM
	}
	for tid, owner := range k.owner {
		if owner == g.name {
			delete(k.owner, tid)
		}
	}
	delete(k.groups, p)
	return 0
}

// ---- reads ---------------------------------------------------------------------

// Read returns a file's contents.
func (k *Kernel) Read(p string) ([]byte, syscall.Errno) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.statLocked(p)
	if !ok {
		return nil, syscall.ENOENT
	}
	if e.Dir {
		return nil, syscall.EISDIR
	}
	g, rest, info := k.resolve(p)
	if info {
		return []byte(k.infoFile(rest)), 0
	}
	switch {
	case rest == "schemata":
		return []byte(k.schemata(g)), 0
	case rest == "tasks":
		return []byte(k.tasks(g)), 0
	case rest == "mode":
		return []byte(g.mode + "\n"), 0
	case rest == "cpus":
		if g.name == "" {
			return []byte(fmt.Sprintf("%x\n", (uint64(1)<<uint(k.cfg.NumCPUs))-1)), 0
		}
		return []byte("0\n"), 0
	case rest == "cpus_list":
		if g.name == "" && k.cfg.NumCPUs > 0 {
			return []byte(fmt.Sprintf("0-%d\n", k.cfg.NumCPUs-1)), 0
		}
		return []byte("\n"), 0
	case rest == "size":
		return []byte(k.size(g)), 0
	case strings.HasPrefix(rest, "mon_data/"):
		parts := strings.Split(rest, "/")
		d, _ := strconv.Atoi(strings.TrimPrefix(parts[1], "mon_L3_"))
		var v uint64
		if k.counters != nil {
			v = k.counters(g.name, d)[parts[2]]
		}
		return []byte(fmt.Sprintf("%d\n", v)), 0
	}
	return nil, syscall.EIO
}

func (k *Kernel) nameWidth() int {
	w := 0
	if k.cfg.hasCAT() {
		w = 2
		if k.cfg.CDPCapable {
			w += 4 // "L3CODE": the width does not change when CDP is switched on
		}
	}
	if k.cfg.hasMBA() && w < 2 {
		w = 2
	}
	return w
}

// schemata is rdtgroup_schemata_show: "%*s:" names, "%d=%x" / "%d=%u" values.
func (k *Kernel) schemata(g *group) string {
	return k.resourceLines(
		func(d int) string { return fmt.Sprintf("%x", g.l3[d]) },
		func(d int) string { return fmt.Sprintf("%d", g.mb[d]) })
}

// size is rdtgroup_size_show: the schemata layout with each L3 mask given as
// the bytes of cache it covers.
func (k *Kernel) size(g *group) string {
	return k.resourceLines(
		func(d int) string {
			return fmt.Sprintf("%d", k.cfg.LLCBytes/int64(k.cfg.CbmLen)*int64(bits.OnesCount64(g.l3[d])))
		},
		func(d int) string { return fmt.Sprintf("%d", g.mb[d]) })
}

// resourceLines writes one "NAME:dom=val;dom=val" line per resource the
// config has, names padded to a shared width as the kernel does.
func (k *Kernel) resourceLines(l3, mb func(d int) string) string {
	var b strings.Builder
	w := k.nameWidth()
	line := func(name string, val func(d int) string) {
		fmt.Fprintf(&b, "%*s:", w, name)
		for i, d := range k.cfg.Domains {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, "%d=%s", d, val(d))
		}
		b.WriteString("\n")
	}
	if k.cfg.hasCAT() {
		line("L3", l3)
	}
	if k.cfg.hasMBA() {
		line("MB", mb)
	}
	return b.String()
}

// tasks lists the group's live tasks; the root group has every other task.
func (k *Kernel) tasks(g *group) string {
	for tid := range k.owner {
		if !k.procs.Exists(tid) {
			delete(k.owner, tid) // the task exited
		}
	}
	var tids []int
	if g.name == "" {
		for _, tid := range k.procs.AllTids() {
			if _, owned := k.owner[tid]; !owned {
				tids = append(tids, tid)
			}
		}
	} else {
		for tid, owner := range k.owner {
			if owner == g.name {
				tids = append(tids, tid)
			}
		}
	}
	sort.Ints(tids)
	var b strings.Builder
	for _, t := range tids {
		fmt.Fprintf(&b, "%d\n", t)
	}
	return b.String()
}

func (k *Kernel) infoFile(p string) string {
	c := k.cfg
	switch p {
	case "info/last_cmd_status":
		return k.lastCmdLocked()
	case "info/L3/cbm_mask":
		return fmt.Sprintf("%x\n", c.cbmMask())
	case "info/L3/min_cbm_bits":
		return fmt.Sprintf("%d\n", c.MinCbmBits)
	case "info/L3/num_closids", "info/MB/num_closids":
		return fmt.Sprintf("%d\n", c.NumClosids)
	case "info/L3/shareable_bits":
		return fmt.Sprintf("%x\n", c.ShareableBits)
	case "info/L3/sparse_masks":
		return "0\n"
	case "info/L3/bit_usage":
		return k.bitUsage()
	case "info/MB/bandwidth_gran":
		return fmt.Sprintf("%d\n", c.MBGran)
	case "info/MB/delay_linear":
		return "1\n"
	case "info/MB/min_bandwidth":
		return fmt.Sprintf("%d\n", c.MBMin)
	case "info/MB/thread_throttle_mode":
		return "max\n"
	case "info/L3_MON/num_rmids":
		return fmt.Sprintf("%d\n", c.NumRmids)
	case "info/L3_MON/mon_features":
		return strings.Join(c.MonFeatures, "\n") + "\n"
	case "info/L3_MON/max_threshold_occupancy":
		return fmt.Sprintf("%d\n", c.LLCBytes/int64(max(c.CbmLen, 1)))
	}
	return ""
}

// bitUsage is rdt_bit_usage_show (no pseudo-locking).
func (k *Kernel) bitUsage() string {
	var b strings.Builder
	for i, d := range k.cfg.Domains {
		if i > 0 {
			b.WriteString(";")
		}
		var sw, excl uint64
		for _, g := range k.groups {
			if g.mode == "exclusive" {
				excl |= g.l3[d]
			} else {
				sw |= g.l3[d]
			}
		}
		fmt.Fprintf(&b, "%d=", d)
		for bit := k.cfg.CbmLen - 1; bit >= 0; bit-- {
			m := uint64(1) << uint(bit)
			hw, s := k.cfg.ShareableBits&m != 0, sw&m != 0
			switch {
			case hw && s:
				b.WriteByte('X')
			case hw:
				b.WriteByte('H')
			case s:
				b.WriteByte('S')
			case excl&m != 0:
				b.WriteByte('E')
			default:
				b.WriteByte('0')
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// ---- writes --------------------------------------------------------------------

// Write handles one write(2) to a file, as the kernel does: each call is one
// command.
func (k *Kernel) Write(p string, data []byte) syscall.Errno {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.statLocked(p)
	if !ok {
		return syscall.ENOENT
	}
	if e.Dir {
		return syscall.EISDIR
	}
	g, rest, info := k.resolve(p)
	if info {
		if rest == "info/L3_MON/max_threshold_occupancy" {
			if _, err := strconv.ParseUint(strings.TrimSpace(string(data)), 0, 32); err != nil {
				return syscall.EINVAL
			}
			return 0
		}
		return syscall.EACCES
	}
	switch rest {
	case "schemata":
		return k.writeSchemata(g, string(data))
	case "tasks":
		return k.writeTasks(g, string(data))
	case "mode":
		return k.writeMode(g, string(data))
	case "cpus", "cpus_list":
		k.clearCmd()
		return k.fail(syscall.EOPNOTSUPP, "CPU assignment is not emulated\n")
	}
	return syscall.EACCES
}

// writeSchemata is rdtgroup_schemata_write: all lines are parsed and staged
// first, and nothing is applied unless every line is valid.
func (k *Kernel) writeSchemata(g *group, buf string) syscall.Errno {
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return syscall.EINVAL // "Valid input requires a trailing newline"
	}
	buf = buf[:len(buf)-1]
	k.clearCmd()
	stagedL3 := map[int]uint64{}
	stagedMB := map[int]int{}
	for _, tok := range strings.Split(buf, "\n") {
		resname, val, found := strings.Cut(tok, ":")
		resname = strings.TrimSpace(resname)
		if !found {
			return k.fail(syscall.EINVAL, "Missing ':'\n")
		}
		if val == "" {
			return k.fail(syscall.EINVAL, "Missing '%s' value\n", resname)
		}
		switch {
		case resname == "L3" && k.cfg.hasCAT():
			if errno := k.parseLine(val, g, stagedL3, nil); errno != 0 {
				return errno
			}
		case resname == "MB" && k.cfg.hasMBA():
			if errno := k.parseLine(val, g, nil, stagedMB); errno != 0 {
				return errno
			}
		default:
			return k.fail(syscall.EINVAL, "Unknown or unsupported resource name '%s'\n", resname)
		}
	}
	for d, v := range stagedL3 {
		g.l3[d] = v
	}
	for d, v := range stagedMB {
		g.mb[d] = v
	}
	return 0
}

// parseLine is parse_line: "id=val;id=val", ids decimal and known.
func (k *Kernel) parseLine(line string, g *group, l3 map[int]uint64, mb map[int]int) syscall.Errno {
	for line != "" {
		var dom string
		dom, line, _ = strings.Cut(line, ";")
		id, val, hasEq := strings.Cut(dom, "=")
		domID, err := strconv.ParseUint(id, 10, 64)
		if !hasEq || err != nil {
			return k.fail(syscall.EINVAL, "Missing '=' or non-numeric domain\n")
		}
		val = strings.TrimSpace(val)
		known := false
		for _, d := range k.cfg.Domains {
			if uint64(d) == domID {
				known = true
			}
		}
		if !known {
			return syscall.EINVAL // the kernel says nothing for an unknown domain
		}
		d := int(domID)
		if l3 != nil {
			if _, dup := l3[d]; dup {
				return k.fail(syscall.EINVAL, "Duplicate domain %d\n", d)
			}
			cbm, errno := k.parseCbm(val, g, d)
			if errno != 0 {
				return errno
			}
			l3[d] = cbm
		} else {
			if _, dup := mb[d]; dup {
				return k.fail(syscall.EINVAL, "Duplicate domain %d\n", d)
			}
			bw, errno := k.bwValidate(val)
			if errno != 0 {
				return errno
			}
			mb[d] = bw
		}
	}
	return 0
}

// parseCbm is parse_cbm + cbm_validate (Intel: no sparse masks).
func (k *Kernel) parseCbm(buf string, g *group, d int) (uint64, syscall.Errno) {
	val, err := strconv.ParseUint(buf, 16, 64)
	if err != nil {
		return 0, k.fail(syscall.EINVAL, "Non-hex character in the mask %s\n", buf)
	}
	if (k.cfg.MinCbmBits > 0 && val == 0) || val > k.cfg.cbmMask() {
		return 0, k.fail(syscall.EINVAL, "Mask out of range\n")
	}
	n := k.cfg.CbmLen
	first := n
	if val != 0 {
		first = bits.TrailingZeros64(val)
	}
	zero := first
	for zero < n && val&(1<<uint(zero)) != 0 {
		zero++
	}
	if zero < n && val>>uint(zero) != 0 {
		return 0, k.fail(syscall.EINVAL, "The mask %x has non-consecutive 1-bits\n", val)
	}
	if zero-first < k.cfg.MinCbmBits {
		return 0, k.fail(syscall.EINVAL, "Need at least %d bits in the mask\n", k.cfg.MinCbmBits)
	}
	if k.overlaps(d, val, g, true) {
		return 0, k.fail(syscall.EINVAL, "Overlaps with exclusive group\n")
	}
	if k.overlaps(d, val, g, false) && g.mode == "exclusive" {
		return 0, k.fail(syscall.EINVAL, "Overlaps with other group\n")
	}
	return val, 0
}

// overlaps is __rdtgroup_cbm_overlaps.
func (k *Kernel) overlaps(d int, cbm uint64, self *group, exclusiveOnly bool) bool {
	if !exclusiveOnly && cbm&k.cfg.ShareableBits != 0 {
		return true
	}
	for _, g := range k.groups {
		if g == self || cbm&g.l3[d] == 0 {
			continue
		}
		if !exclusiveOnly || g.mode == "exclusive" {
			return true
		}
	}
	return false
}

// bwValidate is bw_validate: decimal, within [min_bw, 100], rounded up to
// the next bandwidth_gran step.
func (k *Kernel) bwValidate(buf string) (int, syscall.Errno) {
	bw, err := strconv.ParseUint(buf, 10, 32)
	if err != nil {
		return 0, k.fail(syscall.EINVAL, "Invalid MB value %s\n", buf)
	}
	if bw < uint64(k.cfg.MBMin) || bw > 100 {
		return 0, k.fail(syscall.EINVAL, "MB value %d out of range [%d,%d]\n", bw, k.cfg.MBMin, 100)
	}
	gran := uint64(k.cfg.MBGran)
	return int((bw + gran - 1) / gran * gran), 0
}

// writeTasks is rdtgroup_tasks_write: comma-separated pids, each moved on
// its own; the first failure stops the rest.
func (k *Kernel) writeTasks(g *group, buf string) syscall.Errno {
	k.clearCmd()
	for buf != "" && buf[0] != '\n' {
		var pidStr string
		pidStr, buf, _ = strings.Cut(buf, ",")
		pidStr = strings.TrimSpace(pidStr)
		pid, err := strconv.ParseInt(pidStr, 0, 32)
		if err != nil {
			return k.fail(syscall.EINVAL, "Task list parsing error pid %s\n", pidStr)
		}
		if pid < 0 {
			return k.fail(syscall.EINVAL, "Invalid pid %d\n", pid)
		}
		if pid == 0 {
			continue // the writing task itself: not emulated (FUSE writes come from another process)
		}
		if !k.procs.Exists(int(pid)) {
			k.cmdf("No task %d\n", pid)
			return k.fail(syscall.ESRCH, "Error while processing task %d\n", pid)
		}
		if g.name == "" {
			delete(k.owner, int(pid))
		} else {
			k.owner[int(pid)] = g.name
		}
	}
	return 0
}

// writeMode is rdtgroup_mode_write (no pseudo-locking).
func (k *Kernel) writeMode(g *group, buf string) syscall.Errno {
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return syscall.EINVAL
	}
	buf = strings.TrimSpace(buf[:len(buf)-1])
	k.clearCmd()
	if buf == g.mode {
		return 0
	}
	switch buf {
	case "shareable":
		g.mode = "shareable"
	case "exclusive":
		if !k.cfg.hasCAT() {
			return k.fail(syscall.EINVAL, "Cannot be exclusive without CAT/CDP\n")
		}
		for _, d := range k.cfg.Domains {
			if k.overlaps(d, g.l3[d], g, false) {
				return k.fail(syscall.EINVAL, "Schemata overlaps\n")
			}
		}
		g.mode = "exclusive"
	default:
		return k.fail(syscall.EINVAL, "Unknown or unsupported mode\n")
	}
	return 0
}
