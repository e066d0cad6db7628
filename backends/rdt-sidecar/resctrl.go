package main

// Reading resctrl: where it is mounted, what info/ allows, and, when it is
// not there, what is missing.  Only reads: the sidecar never mounts
// resctrl and writes only inside its own prefix (ops.go).

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Host files; variables so the unit tests can point them elsewhere.
var (
	mountsFile      = "/proc/mounts" // what goresctrl reads too (pkg/rdt/info.go: mountInfoPath)
	filesystemsFile = "/proc/filesystems"
	cpuinfoFile     = "/proc/cpuinfo"
)

// findResctrl returns the mount point and options of the first resctrl
// entry of /proc/mounts: the same rule goresctrl applies.
func findResctrl() (string, []string, bool) {
	f, err := os.Open(mountsFile)
	if err != nil {
		return "", nil, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), " ")
		if len(fields) > 3 && fields[2] == "resctrl" {
			return fields[1], strings.Split(fields[3], ","), true
		}
	}
	return "", nil, false
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

func readUint(path string, base int) (uint64, error) {
	s, err := readTrim(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", path, err)
	}
	return v, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readLimits reads info/ and the root group's schemata (for the cache ids).
func readLimits(root string, opts []string) (*Limits, error) {
	lim := &Limits{Path: root, MountOpts: opts}
	info := filepath.Join(root, "info")
	if !exists(info) {
		return nil, fmt.Errorf("%s is missing: resctrl is mounted but shows no RDT features", info)
	}
	rootSchemata, err := os.ReadFile(filepath.Join(root, "schemata"))
	if err != nil {
		return nil, fmt.Errorf("reading the root schemata: %v", err)
	}
	sch, err := ParseSchemata(string(rootSchemata))
	if err != nil {
		return nil, fmt.Errorf("root schemata: %v", err)
	}
	ids := func(res string) []uint64 {
		var out []uint64
		for id := range sch[res] {
			out = append(out, id)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	closids := []uint64{}
	l3dir := filepath.Join(info, "L3")
	if !exists(l3dir) && exists(filepath.Join(info, "L3CODE")) {
		l3dir, lim.CDP = filepath.Join(info, "L3CODE"), true
	}
	if exists(l3dir) {
		lim.CAT = true
		var v uint64
		if lim.CbmMask, err = readUint(filepath.Join(l3dir, "cbm_mask"), 16); err != nil {
			return nil, err
		}
		if v, err = readUint(filepath.Join(l3dir, "min_cbm_bits"), 10); err != nil {
			return nil, err
		}
		lim.MinCbmBits = int(v)
		if lim.ShareableBits, err = readUint(filepath.Join(l3dir, "shareable_bits"), 16); err != nil {
			return nil, err
		}
		if v, err = readUint(filepath.Join(l3dir, "num_closids"), 10); err != nil {
			return nil, err
		}
		closids = append(closids, v)
		if lim.CDP {
			lim.L3Ids = ids("L3CODE")
		} else {
			lim.L3Ids = ids("L3")
		}
		if len(lim.L3Ids) == 0 {
			return nil, fmt.Errorf("the root schemata has no L3 line")
		}
	}
	if mbdir := filepath.Join(info, "MB"); exists(mbdir) {
		lim.MBA = true
		var v uint64
		if v, err = readUint(filepath.Join(mbdir, "min_bandwidth"), 10); err != nil {
			return nil, err
		}
		lim.MBMin = int(v)
		if v, err = readUint(filepath.Join(mbdir, "bandwidth_gran"), 10); err != nil {
			return nil, err
		}
		lim.MBGran = int(v)
		if v, err = readUint(filepath.Join(mbdir, "num_closids"), 10); err != nil {
			return nil, err
		}
		closids = append(closids, v)
		lim.MBIds = ids("MB")
		for _, o := range opts {
			lim.MBps = lim.MBps || o == "mba_MBps"
		}
	}
	if mondir := filepath.Join(info, "L3_MON"); exists(mondir) {
		v, err := readUint(filepath.Join(mondir, "num_rmids"), 10)
		if err != nil {
			return nil, err
		}
		lim.NumRmids = int(v)
		feats, err := readTrim(filepath.Join(mondir, "mon_features"))
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Split(feats, "\n") {
			if f = strings.TrimSpace(f); f != "" {
				lim.MonFeatures = append(lim.MonFeatures, f)
			}
		}
		lim.Mon = lim.NumRmids > 0 && len(lim.MonFeatures) > 0
	}
	for _, c := range closids {
		if lim.NumClosids == 0 || int(c) < lim.NumClosids {
			lim.NumClosids = int(c)
		}
	}
	return lim, nil
}

// rdtCPUFlags are the /proc/cpuinfo flags of RDT allocation and monitoring.
var rdtCPUFlags = []string{"rdt_a", "cat_l3", "cat_l2", "cdp_l3", "cdp_l2", "mba",
	"cqm", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"}

func cpuRdtFlags() ([]string, bool) {
	f, err := os.Open(cpuinfoFile)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		key, val, ok := strings.Cut(s.Text(), ":")
		if !ok || strings.TrimSpace(key) != "flags" {
			continue
		}
		have := map[string]bool{}
		for _, fl := range strings.Fields(val) {
			have[fl] = true
		}
		var found []string
		for _, fl := range rdtCPUFlags {
			if have[fl] {
				found = append(found, fl)
			}
		}
		return found, true
	}
	return nil, false
}

func kernelHasResctrl() (bool, bool) {
	b, err := os.ReadFile(filesystemsFile)
	if err != nil {
		return false, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == "resctrl" {
			return true, true
		}
	}
	return false, true
}

// Diagnosis says why RDT is unavailable: each missing piece, in words and
// as a short key.
type Diagnosis struct {
	Reason  string   `json:"reason"`
	Missing []string `json:"missing"`
}

func diagnose(initErr error) Diagnosis {
	var why, keys []string
	_, _, mounted := findResctrl()
	if !mounted {
		why = append(why, "resctrl filesystem not mounted (no resctrl entry in "+mountsFile+
			"; as root: mount -t resctrl resctrl /sys/fs/resctrl)")
		keys = append(keys, "resctrl_mount")
		if has, known := kernelHasResctrl(); known && !has {
			why = append(why, "kernel lacks resctrl (not in "+filesystemsFile+
				": built without CONFIG_X86_CPU_RESCTRL, or the CPU has no RDT)")
			keys = append(keys, "kernel_resctrl")
		}
	} else if initErr != nil {
		why = append(why, initErr.Error())
		keys = append(keys, "resctrl_info")
	}
	if flags, known := cpuRdtFlags(); known && len(flags) == 0 {
		why = append(why, "the CPU advertises no RDT (no rdt_a, cat_l3, mba or cqm_* flag in "+cpuinfoFile+")")
		keys = append(keys, "cpu_rdt")
	}
	if len(why) == 0 && initErr != nil {
		why = append(why, initErr.Error())
	}
	return Diagnosis{Reason: "RDT unavailable: " + strings.Join(why, "; "), Missing: keys}
}

// lastCmdStatus is info/last_cmd_status ("" when unreadable or "ok").
func lastCmdStatus(root string) string {
	s, err := readTrim(filepath.Join(root, "info", "last_cmd_status"))
	if err != nil || s == "ok" {
		return ""
	}
	return strings.ReplaceAll(s, "\n", "; ")
}
