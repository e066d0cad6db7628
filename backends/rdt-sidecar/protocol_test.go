package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost points the sidecar's host files at a temporary directory.
func fakeHost(t *testing.T, mounts, filesystems, cpuinfo string) {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"mounts": mounts, "filesystems": filesystems, "cpuinfo": cpuinfo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := [3]string{mountsFile, filesystemsFile, cpuinfoFile}
	mountsFile, filesystemsFile, cpuinfoFile = filepath.Join(dir, "mounts"), filepath.Join(dir, "filesystems"), filepath.Join(dir, "cpuinfo")
	t.Cleanup(func() { mountsFile, filesystemsFile, cpuinfoFile = old[0], old[1], old[2] })
}

func roundTrip(t *testing.T, s *sidecar, lines ...string) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := serve(s, strings.NewReader(strings.Join(lines, "\n")+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	var resps []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		resps = append(resps, r)
	}
	if len(resps) != len(lines) {
		t.Fatalf("%d responses to %d requests", len(resps), len(lines))
	}
	return resps
}

func TestNoResctrl(t *testing.T) {
	fakeHost(t, "proc /proc proc rw 0 0\n", "nodev\tproc\nnodev\tcgroup\n",
		"processor\t: 0\nflags\t\t: fpu vme sse2 rdtscp\n")
	r := roundTrip(t, newSidecar("colosim-"),
		`{"id": 1, "op": "capabilities"}`,
		`{"id": "two", "op": "configure", "classes": {"a": {"l3": 3}}}`,
		`{"id": 3, "op": "cleanup"}`,
		`{"id": 4, "op": "bogus"}`,
		`{"id": 5, "op": "assign", "pids": "x"}`,
		`not json`)
	if r[0]["ok"] != true || r[0]["resctrl"] != false {
		t.Fatalf("capabilities %v", r[0])
	}
	reason := r[0]["reason"].(string)
	for _, want := range []string{"resctrl filesystem not mounted", "kernel lacks resctrl", "the CPU advertises no RDT"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q lacks %q", reason, want)
		}
	}
	if got := r[0]["missing"]; !jsonEqual(got, []any{"resctrl_mount", "kernel_resctrl", "cpu_rdt"}) {
		t.Errorf("missing %v", got)
	}
	for _, i := range []int{1, 2} {
		if r[i]["ok"] != false || r[i]["error"] != reason || r[i]["errno_name"] != "ENODEV" {
			t.Errorf("op %d: %v", i, r[i])
		}
	}
	if r[1]["id"] != "two" {
		t.Errorf("id not echoed: %v", r[1]["id"])
	}
	if r[3]["errno_name"] != "EINVAL" || !strings.Contains(r[3]["error"].(string), "unknown op") {
		t.Errorf("unknown op: %v", r[3])
	}
	if r[4]["id"] != float64(5) || !strings.HasPrefix(r[4]["error"].(string), "bad request") {
		t.Errorf("bad field: %v", r[4])
	}
	if r[5]["id"] != nil || r[5]["ok"] != false {
		t.Errorf("bad json: %v", r[5])
	}
}

func TestMountedButBroken(t *testing.T) {
	// resctrl in /proc/mounts, the kernel has it, but the mount point has no
	// info/ (goresctrl reads the real /proc/mounts: it fails either way).
	dir := t.TempDir()
	fakeHost(t, "resctrl "+dir+" resctrl rw 0 0\n", "nodev\tresctrl\n", "flags\t: fpu cat_l3 cdp_l3 rdt_a mba\n")
	r := roundTrip(t, newSidecar("colosim-"), `{"id": 1, "op": "capabilities"}`)
	reason, _ := r[0]["reason"].(string)
	if r[0]["resctrl"] != false || !jsonEqual(r[0]["missing"], []any{"resctrl_info"}) || strings.Contains(reason, "not mounted") {
		t.Errorf("capabilities %v", r[0])
	}
	if !jsonEqual(r[0]["cpu_flags"], []any{"rdt_a", "cat_l3", "cdp_l3", "mba"}) {
		t.Errorf("cpu_flags %v", r[0]["cpu_flags"])
	}
}

func TestReadLimits(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"schemata":                 "    L3:0=fffff;1=fffff\n    MB:0=100;1=100\n",
		"info/L3/cbm_mask":         "fffff\n",
		"info/L3/min_cbm_bits":     "1\n",
		"info/L3/shareable_bits":   "c0000\n",
		"info/L3/num_closids":      "16\n",
		"info/MB/min_bandwidth":    "10\n",
		"info/MB/bandwidth_gran":   "10\n",
		"info/MB/num_closids":      "8\n",
		"info/L3_MON/num_rmids":    "192\n",
		"info/L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
		"info/last_cmd_status":     "ok\n",
	}
	for p, text := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		os.WriteFile(full, []byte(text), 0o644)
	}
	lim, err := readLimits(root, []string{"rw", "mba_MBps"})
	if err != nil {
		t.Fatal(err)
	}
	if !lim.CAT || lim.CbmMask != 0xfffff || lim.Ways() != 20 || lim.ShareableBits != 0xc0000 ||
		!jsonEqual(lim.L3Ids, []uint64{0, 1}) || !lim.MBA || lim.MBMin != 10 || !lim.MBps ||
		lim.NumClosids != 8 || !lim.Mon || lim.NumRmids != 192 || len(lim.MonFeatures) != 3 {
		t.Errorf("limits %+v", lim)
	}
	if lastCmdStatus(root) != "" {
		t.Error("ok must read as no status")
	}
	os.WriteFile(filepath.Join(root, "info/last_cmd_status"), []byte("No task 9\nError while processing task 9\n"), 0o644)
	if got := lastCmdStatus(root); got != "No task 9; Error while processing task 9" {
		t.Errorf("status %q", got)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
