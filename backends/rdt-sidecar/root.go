package main

// The root group (system/default): its tasks are every process of the host
// that is in no class, so the sidecar writes its schemata only when asked
// (op "root": a policy that gives classes exclusive ways must first take
// those ways from the root group, as seed 004's dynamic priority does), saves
// the schemata it found before the first write, and writes them back at
// cleanup.  The saved copy is also kept in a state file, so that after a
// sidecar killed before its cleanup, `colosim cleanup` (any sidecar with a
// prefix the run's starts with) still restores the root group.

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// rootStateDir holds "<prefix>root.schemata" per sidecar that shrank the
// root group; COLOSIM_RDT_STATE overrides it (tests).
func rootStateDir() string {
	if d := os.Getenv("COLOSIM_RDT_STATE"); d != "" {
		return d
	}
	return "/run/colosim-rdt"
}

func (s *sidecar) rootStateFile() string {
	return filepath.Join(rootStateDir(), s.prefix+"root.schemata")
}

func (s *sidecar) rootSchemataFile() string { return filepath.Join(s.lim.Path, "schemata") }

// root writes the root group's L3 CBMs and MB percents (cache ids left out:
// the full mask, 100 %), checked as a class's are.
func (s *sidecar) root(spec ClassSpec) (response, *opError) {
	if spec.Exclusive {
		return nil, einval("the root group's mode stays shareable", "the root group cannot be exclusive")
	}
	if err := ValidateClass(s.lim, "root", spec); err != nil {
		err.Detail = strings.Replace(err.Detail, "class root", "the root group", 1)
		return nil, err
	}
	file := s.rootSchemataFile()
	if s.rootSaved == nil {
		// a sidecar of this run that died (and was restarted) saved the
		// original already: the root group now shows its own writes
		text, err := os.ReadFile(s.rootStateFile())
		if err != nil {
			text, err = os.ReadFile(file)
		}
		if err != nil {
			return nil, &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("reading the root group's schemata: %v", err)}
		}
		saved, perr := ParseSchemata(string(text))
		if perr != nil {
			return nil, &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("the root group's schemata: %v", perr)}
		}
		err = os.MkdirAll(rootStateDir(), 0o755)
		if err == nil {
			err = os.WriteFile(s.rootStateFile(), []byte(saved.String()), 0o644)
		}
		if err != nil { // the run goes on; only a crashed sidecar's restore is lost
			slog.Warn("cannot save the root group's schemata for colosim cleanup", "error", err)
		}
		s.rootSaved = saved
	}
	want := ExpectedSchemata(s.lim, spec)
	if err := os.WriteFile(file, []byte(want.String()), 0o644); err != nil {
		return nil, s.kernelError(err, "the root group's schemata")
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("reading back the root group: %v", err)}
	}
	got, perr := ParseSchemata(string(text))
	if perr != nil {
		return nil, &opError{Errno: syscall.EIO, Msg: fmt.Sprintf("the root group: %v", perr)}
	}
	if diffs := want.Differs(got); len(diffs) > 0 {
		return nil, &opError{Errno: syscall.EIO, Msg: "the root group's schemata reads back " + strings.Join(diffs, ", ")}
	}
	return response{"schemata": string(text)}, nil
}

// restoreRoot writes back the root group's schemata saved by root (or, by
// a sidecar that died, in a state file under our prefix); called by cleanup
// once our classes are gone, so the root group can have its ways back.
// Returns whether it restored anything.
func (s *sidecar) restoreRoot() (bool, *opError) {
	saved := s.rootSaved
	files, _ := filepath.Glob(filepath.Join(rootStateDir(), s.prefix+"*root.schemata"))
	sort.Strings(files)
	if saved == nil && len(files) > 0 {
		// the oldest: what the root group had before any of those runs
		oldest := files[0]
		for _, f := range files[1:] {
			if a, b := modTime(f), modTime(oldest); a < b {
				oldest = f
			}
		}
		text, err := os.ReadFile(oldest)
		if err == nil {
			saved, _ = ParseSchemata(string(text))
		}
	}
	if saved == nil {
		return false, nil
	}
	if err := os.WriteFile(s.rootSchemataFile(), []byte(saved.String()), 0o644); err != nil {
		return false, s.kernelError(err, "restoring the root group's schemata")
	}
	s.rootSaved = nil
	for _, f := range files {
		os.Remove(f)
	}
	return true, nil
}

func modTime(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}
