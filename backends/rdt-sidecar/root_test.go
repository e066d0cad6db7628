package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A resctrl root directory as plain files: its schemata reads back what
// was written, which is all root() and restoreRoot() need of it.
func plainRoot(t *testing.T) (*sidecar, string) {
	t.Helper()
	dir, state := t.TempDir(), t.TempDir()
	t.Setenv("COLOSIM_RDT_STATE", state)
	if err := os.WriteFile(filepath.Join(dir, "schemata"), []byte("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lim := skylake()
	lim.Path = dir
	s := newSidecar("colosim-run1-")
	s.lim = lim
	return s, state
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRootWritesSavesAndRestores(t *testing.T) {
	s, state := plainRoot(t)
	file := filepath.Join(s.lim.Path, "schemata")
	if _, err := s.root(spec(t, `{"l3": {"0": "0x7e0"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, file); got != "L3:0=7e0;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("root schemata %q", got)
	}
	saved := filepath.Join(state, "colosim-run1-root.schemata")
	if got := read(t, saved); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("saved %q", got)
	}
	// a second write keeps the first saved copy: the root group as found
	if _, err := s.root(spec(t, `{"l3": {"0": "0x700"}, "mb": 50}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, saved); !strings.HasPrefix(got, "L3:0=7ff;1=7ff") {
		t.Errorf("saved copy changed: %q", got)
	}
	if ok, err := s.restoreRoot(); !ok || err != nil {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if got := read(t, file); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("restored %q", got)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("state file left: %v", err)
	}
	if ok, _ := s.restoreRoot(); ok {
		t.Error("restored twice")
	}
}

func TestRootIsValidatedAsAClass(t *testing.T) {
	s, _ := plainRoot(t)
	for js, want := range map[string]string{
		`{"l3": 5}`:                    "non-consecutive 1-bits",
		`{"l3": 1}`:                    "Need at least 2 bits",
		`{"mb": 55}`:                   "", // any error: not a multiple of the granularity
		`{"l3": 3, "exclusive": true}`: "cannot be exclusive",
	} {
		_, err := s.root(spec(t, js))
		if err == nil || !strings.Contains(err.Msg, want) {
			t.Errorf("%s: %v, want %q", js, err, want)
		}
	}
	if got := read(t, filepath.Join(s.lim.Path, "schemata")); !strings.Contains(got, "L3:0=7ff;1=7ff") {
		t.Errorf("a refused write changed the root: %q", got)
	}
}

// After a sidecar died before its cleanup, cleanup under a prefix the dead
// one's starts with restores the oldest saved copy and removes every file.
func TestCleanupRestoresACrashedRunsRoot(t *testing.T) {
	s, state := plainRoot(t)
	old, newer := filepath.Join(state, "colosim-a-root.schemata"), filepath.Join(state, "colosim-b-root.schemata")
	os.WriteFile(old, []byte("L3:0=7ff;1=7ff\nMB:0=100;1=100\n"), 0o644)
	os.WriteFile(newer, []byte("L3:0=7f0;1=7ff\nMB:0=100;1=100\n"), 0o644)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)
	os.WriteFile(filepath.Join(s.lim.Path, "schemata"), []byte("L3:0=700;1=7ff\nMB:0=100;1=100\n"), 0o644)
	other := newSidecar("colosim-b-") // sees only its own prefix's file
	other.lim = s.lim
	s.prefix = "colosim-"
	if ok, err := s.restoreRoot(); !ok || err != nil {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if got := read(t, filepath.Join(s.lim.Path, "schemata")); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("restored %q, want the oldest copy", got)
	}
	for _, f := range []string{old, newer} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left", f)
		}
	}
	if ok, _ := other.restoreRoot(); ok {
		t.Error("nothing left to restore, but restored")
	}
}

// A sidecar restarted mid-run (same prefix) keeps the original the first
// one saved, not the root group it shrank.
func TestARestartedSidecarKeepsTheOriginal(t *testing.T) {
	s, state := plainRoot(t)
	if _, err := s.root(spec(t, `{"l3": {"0": "0x7e0"}}`)); err != nil {
		t.Fatal(err)
	}
	again := newSidecar(s.prefix)
	again.lim = s.lim
	if _, err := again.root(spec(t, `{"l3": {"0": "0x700"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(state, "colosim-run1-root.schemata")); !strings.HasPrefix(got, "L3:0=7ff;1=7ff") {
		t.Errorf("saved %q", got)
	}
	if ok, err := again.restoreRoot(); !ok || err != nil {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if got := read(t, filepath.Join(s.lim.Path, "schemata")); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("restored %q", got)
	}
}
