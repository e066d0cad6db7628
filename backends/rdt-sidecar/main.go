// colosim-rdt-sidecar: RDT (resctrl) classes for colosim's real-host
// backend, on github.com/intel/goresctrl/pkg/rdt.  It speaks JSON lines on
// stdin/stdout, one request per line, one response per request, in order:
//
//	{"id": 1, "op": "capabilities"}
//	{"id": 2, "op": "configure", "classes": {"hi": {"l3": {"0": 4080, "1": 4080}, "mb": 50}}, "force": false}
//	{"id": 3, "op": "assign", "class": "hi", "pids": [1234]}
//	{"id": 4, "op": "pids", "class": "hi"}
//	{"id": 5, "op": "classes"}
//	{"id": 6, "op": "monitor", "class": "hi"}
//	{"id": 7, "op": "cleanup"}
//	{"id": 8, "op": "root", "l3": {"0": 15, "1": 2047}}
//
// answered {"id": N, "ok": true, ...} or {"id": N, "ok": false, "error":
// "...", "errno": 22, "errno_name": "EINVAL", "detail": "..."}.  See
// README.md for every field.  Everything it creates is named
// --prefix+class (the prefix must start with "colosim-"); it never writes
// to any other resctrl group, except the root group's tasks file to move
// back tasks that are in one of its own classes, and the root group's
// schemata when asked (op root), restored at cleanup (root.go).  It never
// mounts resctrl.
// Logs go to stderr; it exits 0 at the end of stdin.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/intel/goresctrl/pkg/rdt"
)

const version = "1"

type request struct {
	ID      json.RawMessage      `json:"id"`
	Op      string               `json:"op"`
	Classes map[string]ClassSpec `json:"classes"`
	Force   bool                 `json:"force"`
	Class   *string              `json:"class"`
	Pids    []int                `json:"pids"`
	L3      *DomainValues        `json:"l3"` // op root
	MB      *DomainValues        `json:"mb"` // op root
}

type response map[string]any

func errorResponse(id json.RawMessage, e *opError) response {
	r := response{"id": id, "ok": false, "error": e.Msg, "errno": int(e.Errno), "errno_name": errnoName(e.Errno)}
	if e.Detail != "" {
		r["detail"] = e.Detail
	}
	return r
}

func errnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{syscall.EINVAL: "EINVAL", syscall.ENODEV: "ENODEV", syscall.ENOENT: "ENOENT",
		syscall.ENOSPC: "ENOSPC", syscall.EPERM: "EPERM", syscall.EBUSY: "EBUSY", syscall.EIO: "EIO",
		syscall.ESRCH: "ESRCH", syscall.EEXIST: "EEXIST", syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.EACCES: "EACCES"}
	if n, ok := names[e]; ok {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

func goresctrlVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/intel/goresctrl" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// serve answers requests until the end of in.
func serve(s *sidecar, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var req request
		var resp response
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			var idOnly struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal([]byte(line), &idOnly) // echo the id if the line has one
			resp = errorResponse(idOnly.ID, &opError{Errno: syscall.EINVAL, Msg: "bad request: " + err.Error()})
		} else {
			resp = s.handle(&req)
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

func main() {
	prefix := flag.String("prefix", "colosim-", `resctrl group name prefix; must start with "colosim-"`)
	verbose := flag.Bool("verbose", false, "log goresctrl's debug messages to stderr")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Printf("colosim-rdt-sidecar %s (goresctrl %s)\n", version, goresctrlVersion())
		return
	}
	if !strings.HasPrefix(*prefix, "colosim-") || strings.ContainsAny(*prefix, "/\n ") {
		fmt.Fprintf(os.Stderr, "colosim-rdt-sidecar: --prefix %q must start with \"colosim-\" and contain no '/', space or newline\n", *prefix)
		os.Exit(2)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	rdt.SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if err := serve(newSidecar(*prefix), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "colosim-rdt-sidecar: %v\n", err)
		os.Exit(1)
	}
}
