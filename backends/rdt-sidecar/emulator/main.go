// colosim-resctrl-emu serves an emulated resctrl filesystem (package
// kernel) over FUSE, for testing the RDT sidecar without RDT hardware.
//
//	colosim-resctrl-emu --mount DIR [--config hw.json] [--counters mon.json]
//	                    [--ready FILE] [--parent PID]
//
// It mounts with mount(2) directly (root; no fusermount), so run it inside
// a private mount namespace (with-emulated-resctrl.sh does: unshare -m):
// the mount is then invisible to the rest of the host and disappears with
// the namespace.  It unmounts and exits on SIGTERM/SIGINT, and when the
// process --parent dies.
//
// --counters names a JSON file {"<group>": {"<l3 id>": {"llc_occupancy": N,
// ...}}} ("" is the root group) that is re-read on every mon_data read:
// the emulation has no hardware counters, so the test supplies the values.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"colosim/rdt-sidecar/emulator/kernel"
)

// emuFS hands out inode numbers: one per path, fresh after a group is removed.
type emuFS struct {
	k       *kernel.Kernel
	mu      sync.Mutex
	inos    map[string]uint64
	nextIno uint64
}

func (f *emuFS) ino(p string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i, ok := f.inos[p]; ok {
		return i
	}
	f.nextIno++
	f.inos[p] = f.nextIno
	return f.nextIno
}

func (f *emuFS) forget(prefix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.inos {
		if p == prefix || len(p) > len(prefix) && p[:len(prefix)+1] == prefix+"/" {
			delete(f.inos, p)
		}
	}
}

// node is one path of the tree; its contents live in the kernel model.
type node struct {
	fs.Inode
	fsys *emuFS
	path string
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
)

var mountTime = uint64(time.Now().Unix())

func fillAttr(e kernel.Entry, out *fuse.Attr) {
	out.Atime, out.Mtime, out.Ctime = mountTime, mountTime, mountTime
	if e.Dir {
		out.Mode = fuse.S_IFDIR | e.Mode
		out.Nlink = 2
	} else {
		out.Mode = fuse.S_IFREG | e.Mode
		out.Nlink = 1
	}
	out.Size = 0 // like kernfs; reads use direct I/O
}

func (n *node) child(ctx context.Context, name string, e kernel.Entry) *fs.Inode {
	p := path.Join(n.path, name)
	mode := uint32(fuse.S_IFREG)
	if e.Dir {
		mode = fuse.S_IFDIR
	}
	return n.NewInode(ctx, &node{fsys: n.fsys, path: p}, fs.StableAttr{Mode: mode, Ino: n.fsys.ino(p)})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e, ok := n.fsys.k.Stat(path.Join(n.path, name))
	if !ok {
		return nil, syscall.ENOENT
	}
	fillAttr(e, &out.Attr)
	return n.child(ctx, name, e), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	es, errno := n.fsys.k.List(n.path)
	if errno != 0 {
		return nil, errno
	}
	list := make([]fuse.DirEntry, 0, len(es))
	for _, e := range es {
		mode := uint32(fuse.S_IFREG)
		if e.Dir {
			mode = fuse.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: e.Name, Mode: mode, Ino: n.fsys.ino(path.Join(n.path, e.Name))})
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e, ok := n.fsys.k.Stat(n.path)
	if !ok {
		return syscall.ENOENT
	}
	fillAttr(e, &out.Attr)
	return 0
}

// Setattr accepts the truncation of O_TRUNC opens (kernfs ignores it too).
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.Getattr(ctx, fh, out)
}

// handle holds what a read sees: the file as it was at open (seq_file-like).
type handle struct{ content []byte }

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := &handle{}
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		b, errno := n.fsys.k.Read(n.path)
		if errno != 0 {
			return nil, 0, errno
		}
		h.content = b
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	if off >= int64(len(h.content)) {
		return fuse.ReadResultData(nil), 0
	}
	end := off + int64(len(dest))
	if end > int64(len(h.content)) {
		end = int64(len(h.content))
	}
	return fuse.ReadResultData(h.content[off:end]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := n.fsys.k.Write(n.path, data); errno != 0 {
		return 0, errno
	}
	return uint32(len(data)), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.fsys.k.Mkdir(n.path, name); errno != 0 {
		return nil, errno
	}
	e, _ := n.fsys.k.Stat(path.Join(n.path, name))
	fillAttr(e, &out.Attr)
	return n.child(ctx, name, e), 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := path.Join(n.path, name)
	if errno := n.fsys.k.Rmdir(p); errno != 0 {
		return errno
	}
	n.fsys.forget(p)
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EACCES // resctrl has no create: files exist or not
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return syscall.EPERM
}

// fileCounters re-reads the counters file on every call.
func fileCounters(file string) kernel.Counters {
	if file == "" {
		return nil
	}
	return func(group string, domain int) map[string]uint64 {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil
		}
		var all map[string]map[string]map[string]uint64
		if json.Unmarshal(b, &all) != nil {
			return nil
		}
		return all[group][strconv.Itoa(domain)]
	}
}

func main() {
	mnt := flag.String("mount", "", "mount point (required)")
	config := flag.String("config", "", "JSON file with the emulated hardware (kernel.Config); default: a 2-socket Skylake-SP-like host")
	counters := flag.String("counters", "", "JSON file with monitoring values, re-read on each read")
	ready := flag.String("ready", "", "file to create once mounted")
	parent := flag.Int("parent", 0, "exit when this process (our parent) dies")
	debug := flag.Bool("debug", false, "log FUSE requests")
	flag.Parse()
	if *mnt == "" {
		fmt.Fprintln(os.Stderr, "colosim-resctrl-emu: --mount is required")
		os.Exit(2)
	}
	if *parent != 0 {
		// SIGTERM when the parent (the shell that execs the sidecar) dies.
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
		if os.Getppid() != *parent {
			fmt.Fprintln(os.Stderr, "colosim-resctrl-emu: parent already gone")
			os.Exit(1)
		}
	}
	cfg := kernel.DefaultConfig()
	if *config != "" {
		b, err := os.ReadFile(*config)
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "colosim-resctrl-emu: --config %s: %v\n", *config, err)
			os.Exit(2)
		}
	}
	k, err := kernel.New(cfg, kernel.HostProcs{}, fileCounters(*counters))
	if err != nil {
		fmt.Fprintf(os.Stderr, "colosim-resctrl-emu: %v\n", err)
		os.Exit(2)
	}
	zero := time.Duration(0)
	root := &node{fsys: &emuFS{k: k, inos: map[string]uint64{}, nextIno: 1}, path: ""}
	server, err := fs.Mount(*mnt, root, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "resctrl", Name: "resctrl",
			Debug: *debug, DisableXAttrs: true},
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "colosim-resctrl-emu: mounting FUSE at %s: %v\n", *mnt, err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-sig
		_ = server.Unmount()
	}()
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "colosim-resctrl-emu: %v\n", err)
			_ = server.Unmount()
			os.Exit(1)
		}
	}
	server.Wait()
}
