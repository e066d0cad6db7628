package kernel

import (
	"strings"
	"syscall"
	"testing"
)

type fakeProcs map[int]bool

func (f fakeProcs) Exists(tid int) bool { return f[tid] }
func (f fakeProcs) AllTids() []int {
	var t []int
	for tid := range f {
		t = append(t, tid)
	}
	return t
}

func testConfig() Config {
	return Config{CbmLen: 11, MinCbmBits: 2, NumClosids: 4, Domains: []int{0, 1}, CDPCapable: true,
		MBMin: 10, MBGran: 10, NumRmids: 8,
		MonFeatures: []string{"llc_occupancy", "mbm_total_bytes", "mbm_local_bytes"},
		LLCBytes:    11 << 20, NumCPUs: 2}
}

func newKernel(t *testing.T, procs fakeProcs) *Kernel {
	t.Helper()
	k, err := New(testConfig(), procs, func(g string, d int) map[string]uint64 {
		if g == "grp" && d == 1 {
			return map[string]uint64{"llc_occupancy": 4096, "mbm_total_bytes": 12345}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func read(t *testing.T, k *Kernel, p string) string {
	t.Helper()
	b, errno := k.Read(p)
	if errno != 0 {
		t.Fatalf("read %s: %v", p, errno)
	}
	return string(b)
}

func TestInfoAndRootSchemata(t *testing.T) {
	k := newKernel(t, fakeProcs{})
	for p, want := range map[string]string{
		"info/L3/cbm_mask": "7ff\n", "info/L3/min_cbm_bits": "2\n", "info/L3/num_closids": "4\n",
		"info/MB/min_bandwidth": "10\n", "info/MB/bandwidth_gran": "10\n", "info/last_cmd_status": "ok\n",
		"info/L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
		"schemata":                 "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n",
	} {
		if got := read(t, k, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
}

func TestSchemataValidation(t *testing.T) {
	k := newKernel(t, fakeProcs{})
	if e := k.Mkdir("", "grp"); e != 0 {
		t.Fatal(e)
	}
	cases := []struct {
		in     string
		errno  syscall.Errno
		status string
	}{
		{"L3:0=5\n", syscall.EINVAL, "The mask 5 has non-consecutive 1-bits\n"},
		{"L3:0=1\n", syscall.EINVAL, "Need at least 2 bits in the mask\n"},
		{"L3:0=fff\n", syscall.EINVAL, "Mask out of range\n"},
		{"L3:0=0\n", syscall.EINVAL, "Mask out of range\n"},
		{"L3:0=xyz\n", syscall.EINVAL, "Non-hex character in the mask xyz\n"},
		{"L3:7=3\n", syscall.EINVAL, "ok\n"},
		{"L3:0=3;0=3\n", syscall.EINVAL, "Duplicate domain 0\n"},
		{"L3 0=3\n", syscall.EINVAL, "Missing ':'\n"},
		{"L3:\n", syscall.EINVAL, "Missing 'L3' value\n"},
		{"L2:0=3\n", syscall.EINVAL, "Unknown or unsupported resource name 'L2'\n"},
		{"L3:a=3\n", syscall.EINVAL, "Missing '=' or non-numeric domain\n"},
		{"MB:0=5\n", syscall.EINVAL, "MB value 5 out of range [10,100]\n"},
		{"MB:0=101\n", syscall.EINVAL, "MB value 101 out of range [10,100]\n"},
		{"MB:0=x\n", syscall.EINVAL, "Invalid MB value x\n"},
	}
	for _, c := range cases {
		if e := k.Write("grp/schemata", []byte(c.in)); e != c.errno {
			t.Errorf("%q: errno %v, want %v", c.in, e, c.errno)
		}
		if got := k.LastCmdStatus(); got != c.status {
			t.Errorf("%q: last_cmd_status %q, want %q", c.in, got, c.status)
		}
	}
	// Nothing was applied by the failed writes, and a write without "\n" is refused.
	if got := read(t, k, "grp/schemata"); got != "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n" {
		t.Errorf("after failures: %q", got)
	}
	if e := k.Write("grp/schemata", []byte("L3:0=3")); e != syscall.EINVAL {
		t.Errorf("no trailing newline: %v", e)
	}
	// All or nothing: a bad second line leaves the first unapplied.
	if e := k.Write("grp/schemata", []byte("L3:0=3\nMB:0=5\n")); e != syscall.EINVAL {
		t.Errorf("mixed write: %v", e)
	}
	if e := k.Write("grp/schemata", []byte("L3:0=3c;1=7f0\nMB:1=55\n")); e != 0 {
		t.Fatalf("valid write: %v %s", e, k.LastCmdStatus())
	}
	if got := read(t, k, "grp/schemata"); got != "    L3:0=3c;1=7f0\n    MB:0=100;1=60\n" {
		t.Errorf("after valid write (MB rounds up to the granularity): %q", got)
	}
}

func TestClosidsAndDefaults(t *testing.T) {
	k := newKernel(t, fakeProcs{})
	for _, n := range []string{"a", "b", "c"} {
		if e := k.Mkdir("", n); e != 0 {
			t.Fatalf("mkdir %s: %v", n, e)
		}
	}
	if e := k.Mkdir("", "d"); e != syscall.ENOSPC || k.LastCmdStatus() != "Out of CLOSIDs\n" {
		t.Errorf("4th group: %v %q", e, k.LastCmdStatus())
	}
	if e := k.Mkdir("", "a"); e != syscall.EEXIST {
		t.Errorf("existing: %v", e)
	}
	if e := k.Mkdir("a", "x"); e != syscall.EPERM {
		t.Errorf("nested: %v", e)
	}
	if e := k.Rmdir("b"); e != 0 {
		t.Fatal(e)
	}
	if e := k.Rmdir(""); e != syscall.EPERM {
		t.Errorf("rmdir root: %v", e)
	}
	if e := k.Mkdir("", "d"); e != 0 {
		t.Errorf("after rmdir: %v", e)
	}
	es, _ := k.List("")
	var names []string
	for _, e := range es {
		if e.Dir {
			names = append(names, e.Name)
		}
	}
	if got := strings.Join(names, ","); got != "mon_data,mon_groups,info,a,c,d" {
		t.Errorf("root dirs: %s", got)
	}
}

func TestTasksAndMonitoring(t *testing.T) {
	procs := fakeProcs{100: true, 101: true, 200: true}
	k := newKernel(t, procs)
	if e := k.Mkdir("", "grp"); e != 0 {
		t.Fatal(e)
	}
	if e := k.Write("grp/tasks", []byte("100\n")); e != 0 {
		t.Fatal(e)
	}
	if e := k.Write("grp/tasks", []byte("101,999\n")); e != syscall.ESRCH {
		t.Errorf("missing task: %v", e)
	}
	if got := k.LastCmdStatus(); got != "No task 999\nError while processing task 999\n" {
		t.Errorf("status %q", got)
	}
	if got := read(t, k, "grp/tasks"); got != "100\n101\n" {
		t.Errorf("grp tasks %q", got)
	}
	if got := read(t, k, "tasks"); got != "200\n" {
		t.Errorf("root tasks %q", got)
	}
	delete(procs, 101) // exits
	if got := read(t, k, "grp/tasks"); got != "100\n" {
		t.Errorf("after exit %q", got)
	}
	if got := read(t, k, "grp/mon_data/mon_L3_01/llc_occupancy"); got != "4096\n" {
		t.Errorf("occupancy %q", got)
	}
	if got := read(t, k, "grp/mon_data/mon_L3_00/mbm_local_bytes"); got != "0\n" {
		t.Errorf("mbm %q", got)
	}
	if e := k.Rmdir("grp"); e != 0 {
		t.Fatal(e)
	}
	if got := read(t, k, "tasks"); got != "100\n200\n" {
		t.Errorf("tasks back in root: %q", got)
	}
}

func TestExclusive(t *testing.T) {
	k := newKernel(t, fakeProcs{})
	k.Mkdir("", "a")
	k.Write("a/schemata", []byte("L3:0=f;1=f\n"))
	// The root group still has every bit: a group cannot become exclusive.
	if e := k.Write("a/mode", []byte("exclusive\n")); e != syscall.EINVAL || k.LastCmdStatus() != "Schemata overlaps\n" {
		t.Errorf("exclusive over root: %v %q", e, k.LastCmdStatus())
	}
	k.Write("schemata", []byte("L3:0=7f0;1=7f0\n"))
	if e := k.Write("a/mode", []byte("exclusive\n")); e != 0 {
		t.Fatalf("exclusive: %v %q", e, k.LastCmdStatus())
	}
	k.Mkdir("", "b")
	if got := read(t, k, "b/schemata"); !strings.Contains(got, "L3:0=7f0;1=7f0") {
		t.Errorf("new group avoids the exclusive bits: %q", got)
	}
	if e := k.Write("b/schemata", []byte("L3:0=18\n")); e != syscall.EINVAL || k.LastCmdStatus() != "Overlaps with exclusive group\n" {
		t.Errorf("overlap: %v %q", e, k.LastCmdStatus())
	}
	if got := read(t, k, "info/L3/bit_usage"); got != "0=SSSSSSSEEEE;1=SSSSSSSEEEE\n" {
		t.Errorf("bit_usage %q", got)
	}
}
