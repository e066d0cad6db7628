package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/intel/goresctrl/pkg/rdt"
)

// sidecar is the state between requests: the resctrl limits once goresctrl
// is initialised, and the classes of the last successful configure (the
// state a failed configure is rolled back to).
type sidecar struct {
	prefix    string
	lim       *Limits
	diag      Diagnosis
	classes   map[string]ClassSpec
	rootSaved Schemata // the root group's schemata before our first "root" (root.go)
}

func newSidecar(prefix string) *sidecar {
	return &sidecar{prefix: prefix, classes: map[string]ClassSpec{}}
}

// ensure initialises goresctrl on first use (and retries while resctrl is
// unavailable, so mounting it later works without a restart).
func (s *sidecar) ensure() *opError {
	if s.lim != nil {
		return nil
	}
	path, opts, mounted := findResctrl()
	if !mounted {
		s.diag = diagnose(nil)
		return &opError{Errno: syscall.ENODEV, Msg: s.diag.Reason}
	}
	if err := rdt.Initialize(s.prefix); err != nil {
		s.diag = diagnose(err)
		return &opError{Errno: syscall.ENODEV, Msg: s.diag.Reason}
	}
	lim, err := readLimits(path, opts)
	if err != nil {
		s.diag = diagnose(err)
		return &opError{Errno: syscall.ENODEV, Msg: s.diag.Reason}
	}
	s.lim, s.diag = lim, Diagnosis{}
	return nil
}

func (s *sidecar) handle(req *request) response {
	var (
		r   response
		err *opError
	)
	known := map[string]bool{"capabilities": true, "configure": true, "assign": true, "pids": true,
		"classes": true, "monitor": true, "cleanup": true, "root": true}
	if !known[req.Op] {
		err = &opError{Errno: syscall.EINVAL, Msg: fmt.Sprintf("unknown op %q", req.Op),
			Detail: "ops: capabilities, configure, assign, pids, classes, monitor, cleanup, root"}
	} else if req.Op == "capabilities" {
		r = s.capabilities()
	} else if err = s.ensure(); err == nil {
		switch req.Op {
		case "configure":
			r, err = s.configure(req.Classes, req.Force)
		case "assign":
			r, err = s.assign(req.Class, req.Pids)
		case "pids":
			r, err = s.pids(req.Class)
		case "classes":
			r, err = s.listClasses()
		case "monitor":
			r, err = s.monitor(req.Class)
		case "cleanup":
			r, err = s.cleanup()
		case "root":
			r, err = s.root(ClassSpec{L3: req.L3, MB: req.MB})
		}
	}
	if err != nil {
		return errorResponse(req.ID, err)
	}
	r["id"], r["ok"] = req.ID, true
	return r
}

func hexStr(v uint64) string { return strconv.FormatUint(v, 16) }

func (s *sidecar) capabilities() response {
	r := response{"sidecar": version, "goresctrl": goresctrlVersion(), "prefix": s.prefix}
	if flags, known := cpuRdtFlags(); known {
		r["cpu_flags"] = append([]string{}, flags...)
	}
	if err := s.ensure(); err != nil {
		r["resctrl"], r["reason"], r["missing"] = false, s.diag.Reason, s.diag.Missing
		return r
	}
	l := s.lim
	r["resctrl"], r["path"], r["mount_options"], r["num_closids"] = true, l.Path, l.MountOpts, l.NumClosids
	r["l3"], r["mb"], r["mon"] = nil, nil, nil
	if l.CAT {
		r["l3"] = map[string]any{"cbm_mask": hexStr(l.CbmMask), "ways": l.Ways(), "min_cbm_bits": l.MinCbmBits,
			"shareable_bits": hexStr(l.ShareableBits), "cache_ids": l.L3Ids, "cdp": l.CDP}
	}
	if l.MBA {
		r["mb"] = map[string]any{"min_bandwidth": l.MBMin, "bandwidth_gran": l.MBGran, "cache_ids": l.MBIds, "mbps": l.MBps}
	}
	if l.Mon {
		r["mon"] = map[string]any{"num_rmids": l.NumRmids, "features": l.MonFeatures}
	}
	names, _ := s.ownClasses()
	r["classes"] = names
	return r
}

// ownClasses lists the classes in resctrl under our prefix (whoever made them).
func (s *sidecar) ownClasses() ([]string, *opError) {
	ents, err := os.ReadDir(s.lim.Path)
	if err != nil {
		return nil, &opError{Errno: syscall.EIO, Msg: err.Error()}
	}
	names := []string{}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), s.prefix) && exists(filepath.Join(s.lim.Path, e.Name(), "tasks")) {
			names = append(names, strings.TrimPrefix(e.Name(), s.prefix))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (s *sidecar) groupDir(class string) string {
	if isRoot(class) {
		return s.lim.Path
	}
	return filepath.Join(s.lim.Path, s.prefix+class)
}

func isRoot(class string) bool { return class == "" || class == rdt.RootClassName }

// kernelError turns a failed resctrl write into resctrl's own words
// (info/last_cmd_status) when it has some.
func (s *sidecar) kernelError(err error, what string) *opError {
	e := &opError{Errno: syscall.EIO, Msg: err.Error(), Detail: what}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = errno
	}
	if status := lastCmdStatus(s.lim.Path); status != "" && (strings.Contains(err.Error(), status) || errno != 0) {
		e.Msg, e.Detail = status, joinDetail(what, err.Error())
		if errno == 0 {
			e.Errno = syscall.EINVAL
		}
	}
	return e
}

func (s *sidecar) configure(classes map[string]ClassSpec, force bool) (response, *opError) {
	lim := s.lim
	if !lim.CAT && !lim.MBA {
		return nil, &opError{Errno: syscall.ENODEV, Msg: "no RDT allocation on this host: resctrl's info/ has neither L3 nor MB"}
	}
	if classes == nil {
		classes = map[string]ClassSpec{}
	}
	names := make([]string, 0, len(classes))
	for n := range classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ValidateClass(lim, n, classes[n]); err != nil {
			return nil, err
		}
	}
	conf, _, gerr := GoresctrlConfig(lim, classes)
	if gerr != nil {
		return nil, &opError{Errno: syscall.EINVAL, Msg: gerr.Error()}
	}
	before, oerr := s.ownClasses()
	if oerr != nil {
		return nil, oerr
	}
	if err := s.apply(conf, classes, names, force); err != nil {
		if rb := s.rollback(); rb != nil {
			err.Detail = joinDetail(err.Detail, "rolling back to the previous classes failed too: "+rb.Error())
		}
		return nil, err
	}
	s.classes = map[string]ClassSpec{}
	for n, c := range classes {
		s.classes[n] = c
	}
	out := map[string]any{}
	for _, n := range names {
		text, _ := os.ReadFile(filepath.Join(s.groupDir(n), "schemata"))
		mode, _ := readTrim(filepath.Join(s.groupDir(n), "mode"))
		out[n] = map[string]any{"schemata": string(text), "mode": mode, "group": s.prefix + n}
	}
	removed := []string{}
	for _, n := range before {
		if _, ok := classes[n]; !ok {
			removed = append(removed, n)
		}
	}
	return response{"classes": out, "removed": removed}, nil
}

// apply: mkdir the new groups (so resctrl's own message is at hand if the
// kernel refuses one), goresctrl's SetConfig (schemata of every class,
// removal of our groups that are no longer wanted), the modes, and a check
// that every schemata reads back as asked.
func (s *sidecar) apply(conf *rdt.Config, classes map[string]ClassSpec, names []string, force bool) *opError {
	for _, n := range names {
		dir := s.groupDir(n)
		if exists(dir) {
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			var errno syscall.Errno
			errors.As(err, &errno)
			e := &opError{Errno: errno, Msg: err.Error()}
			if errno == 0 {
				e.Errno = syscall.EIO
			}
			// mkdir's resctrl messages: "Out of CLOSIDs", "Out of RMIDs", "No space on L3:N"
			if status := lastCmdStatus(s.lim.Path); status != "" && errno == syscall.ENOSPC {
				e.Msg, e.Detail = status, fmt.Sprintf("creating class %s: %v", n, err)
			}
			return e
		}
	}
	if err := rdt.SetConfig(conf, force); err != nil {
		e := s.kernelError(err, "goresctrl")
		if strings.Contains(err.Error(), "refusing to remove non-empty") {
			e.Errno, e.Msg, e.Detail = syscall.EBUSY, err.Error(), "configure with force=true moves their tasks to the root group"
		}
		return e
	}
	if err := s.applyModes(classes); err != nil {
		return err
	}
	for _, n := range names {
		text, err := os.ReadFile(filepath.Join(s.groupDir(n), "schemata"))
		if err != nil {
			return &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("reading back class %s: %v", n, err)}
		}
		got, perr := ParseSchemata(string(text))
		if perr != nil {
			return &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("class %s: %v", n, perr)}
		}
		if diffs := ExpectedSchemata(s.lim, classes[n]).Differs(got); len(diffs) > 0 {
			return &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("class %s: the schemata reads back %s", n, strings.Join(diffs, ", ")),
				Detail: "written: " + strings.TrimSpace(ExpectedSchemata(s.lim, classes[n]).String())}
		}
	}
	return nil
}

// applyModes writes "exclusive" / "shareable" to our classes' mode files
// where they differ.
func (s *sidecar) applyModes(classes map[string]ClassSpec) *opError {
	names := make([]string, 0, len(classes))
	for n := range classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		want := "shareable"
		if classes[n].Exclusive {
			want = "exclusive"
		}
		file := filepath.Join(s.groupDir(n), "mode")
		cur, err := readTrim(file)
		if err != nil {
			return &opError{Errno: syscall.EIO, Msg: err.Error()}
		}
		if cur == want {
			continue
		}
		if err := os.WriteFile(file, []byte(want+"\n"), 0o644); err != nil {
			return s.kernelError(err, fmt.Sprintf("class %s: mode %s", n, want))
		}
	}
	return nil
}

// rollback re-applies the classes of the last successful configure.
func (s *sidecar) rollback() error {
	conf, _, err := GoresctrlConfig(s.lim, s.classes)
	if err != nil {
		return err
	}
	if err := rdt.SetConfig(conf, false); err != nil {
		return err
	}
	if e := s.applyModes(s.classes); e != nil {
		return e
	}
	return nil
}

// tasksOf reads a group's tasks file.
func tasksOf(dir string) (map[int]bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, f := range strings.Fields(string(b)) {
		if t, err := strconv.Atoi(f); err == nil {
			out[t] = true
		}
	}
	return out, nil
}

// threadsOf lists a process's threads (resctrl moves one task per write:
// a process is moved by writing each of its thread ids).
func threadsOf(pid int) ([]int, bool) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, false
	}
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	return tids, true
}

func (s *sidecar) className(class *string) (string, *opError) {
	if class == nil {
		return "", &opError{Errno: syscall.EINVAL, Msg: `missing "class" ("" is the root group, system/default)`}
	}
	if isRoot(*class) {
		return "", nil
	}
	if !classNameRE.MatchString(*class) || !exists(filepath.Join(s.groupDir(*class), "tasks")) {
		return "", &opError{Errno: syscall.ENOENT, Msg: fmt.Sprintf("no class %q", *class), Detail: "configure it first"}
	}
	return *class, nil
}

// assign moves every thread of the given processes to the class.  Tasks in
// a resctrl group that is not ours are left alone (an error); moving to the
// root group ("") only takes back tasks that are in one of our classes.
func (s *sidecar) assign(class *string, pids []int) (response, *opError) {
	name, err := s.className(class)
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, &opError{Errno: syscall.EINVAL, Msg: `"pids" is empty`}
	}
	owner := map[int]string{} // tid -> group directory (absent: the root group)
	ents, rerr := os.ReadDir(s.lim.Path)
	if rerr != nil {
		return nil, &opError{Errno: syscall.EIO, Msg: rerr.Error()}
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "info" {
			continue
		}
		tasks, terr := tasksOf(filepath.Join(s.lim.Path, e.Name()))
		if terr != nil {
			continue // not a control group (mon_data, mon_groups)
		}
		for t := range tasks {
			owner[t] = e.Name()
		}
	}
	var move, missing []int
	for _, pid := range pids {
		if pid <= 0 {
			return nil, &opError{Errno: syscall.EINVAL, Msg: fmt.Sprintf("Invalid pid %d", pid)}
		}
		tids, ok := threadsOf(pid)
		if !ok {
			missing = append(missing, pid)
			continue
		}
		for _, t := range tids {
			cur, inGroup := owner[t]
			if inGroup && !strings.HasPrefix(cur, s.prefix) {
				return nil, &opError{Errno: syscall.EPERM,
					Msg:    fmt.Sprintf("task %d (of process %d) is in resctrl group %s, which colosim does not manage", t, pid, cur),
					Detail: "not moved; nothing was moved"}
			}
			if name == "" && !inGroup {
				continue // already in the root group
			}
			move = append(move, t)
		}
	}
	if len(move) > 0 {
		cls, ok := rdt.GetClass(rdt.RootClassName)
		if name != "" {
			cls, ok = rdt.GetClass(name)
		}
		if !ok {
			return nil, &opError{Errno: syscall.ENOENT, Msg: fmt.Sprintf("goresctrl has no class %q", name)}
		}
		strs := make([]string, len(move))
		for i, t := range move {
			strs[i] = strconv.Itoa(t)
		}
		if err := cls.AddPids(strs...); err != nil {
			e := s.kernelError(err, "assigning tasks")
			return nil, e
		}
	}
	sort.Ints(move)
	if move == nil {
		move = []int{}
	}
	if missing == nil {
		missing = []int{}
	}
	return response{"class": name, "tids": move, "missing": missing}, nil
}

// lookupClass finds a class in goresctrl, which names the root group
// RootClassName where the protocol uses "".
func lookupClass(name string) (rdt.CtrlGroup, *opError) {
	lookup := name
	if name == "" {
		lookup = rdt.RootClassName
	}
	cls, ok := rdt.GetClass(lookup)
	if !ok {
		return nil, &opError{Errno: syscall.ENOENT, Msg: fmt.Sprintf("no class %q", name)}
	}
	return cls, nil
}

func (s *sidecar) classPids(name string) ([]int, *opError) {
	cls, operr := lookupClass(name)
	if operr != nil {
		return nil, operr
	}
	strs, err := cls.GetPids()
	if err != nil {
		return nil, &opError{Errno: syscall.EIO, Msg: err.Error()}
	}
	pids := make([]int, 0, len(strs))
	for _, p := range strs {
		if v, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
			pids = append(pids, v)
		}
	}
	sort.Ints(pids)
	return pids, nil
}

// pids reads the class's tasks file back (thread ids).
func (s *sidecar) pids(class *string) (response, *opError) {
	name, err := s.className(class)
	if err != nil {
		return nil, err
	}
	pids, err := s.classPids(name)
	if err != nil {
		return nil, err
	}
	return response{"class": name, "pids": pids}, nil
}

// listClasses: every class under our prefix with its tasks, schemata and mode.
func (s *sidecar) listClasses() (response, *opError) {
	names, err := s.ownClasses()
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, n := range names {
		pids, err := s.classPids(n)
		if err != nil {
			return nil, err
		}
		text, _ := os.ReadFile(filepath.Join(s.groupDir(n), "schemata"))
		mode, _ := readTrim(filepath.Join(s.groupDir(n), "mode"))
		_, configured := s.classes[n]
		out[n] = map[string]any{"pids": pids, "schemata": string(text), "mode": mode, "configured": configured}
	}
	return response{"classes": out}, nil
}

// monitor: the class's mon_data, per L3 cache id and event.
func (s *sidecar) monitor(class *string) (response, *opError) {
	name, err := s.className(class)
	if err != nil {
		return nil, err
	}
	if !rdt.MonSupported() {
		return nil, &opError{Errno: syscall.EOPNOTSUPP, Msg: "RDT monitoring (CMT/MBM) is not available: resctrl has no info/L3_MON"}
	}
	cls, err := lookupClass(name)
	if err != nil {
		return nil, err
	}
	data := cls.GetMonData()
	if len(data.L3) == 0 {
		return nil, &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("no monitoring data for class %q", name),
			Detail: "mon_data is missing or unreadable; see the sidecar's stderr"}
	}
	out := map[string]map[string]uint64{}
	for id, leaf := range data.L3 {
		out[strconv.FormatUint(id, 10)] = leaf
	}
	feats := rdt.GetMonFeatures()[rdt.MonResourceL3]
	return response{"class": name, "l3": out, "features": feats}, nil
}

// cleanup removes every group under our prefix (their tasks go to the root
// group): an empty goresctrl configuration, forced; then the root group gets
// back the schemata it had before our first "root" (root.go).
func (s *sidecar) cleanup() (response, *opError) {
	before, err := s.ownClasses()
	if err != nil {
		return nil, err
	}
	if err := rdt.SetConfig(&rdt.Config{}, true); err != nil {
		return nil, s.kernelError(err, "goresctrl")
	}
	s.classes = map[string]ClassSpec{}
	after, err := s.ownClasses()
	if err != nil {
		return nil, err
	}
	if len(after) > 0 {
		return nil, &opError{Errno: syscall.EBUSY, Msg: "classes left after cleanup: " + strings.Join(after, ", ")}
	}
	restored, rerr := s.restoreRoot()
	if rerr != nil {
		return nil, rerr
	}
	return response{"removed": before, "root_restored": restored}, nil
}
