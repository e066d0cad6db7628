#!/bin/sh
# Run a command (the RDT sidecar) against an emulated resctrl filesystem.
#
#   unshare --mount --propagation private \
#     sh with-emulated-resctrl.sh WORKDIR EMULATOR [EMULATOR-ARGS...] -- COMMAND [ARGS...]
#
# Must run inside a private mount namespace (the unshare above): every mount
# made here stays in it and vanishes with it, so the host never sees them.
#  1. EMULATOR (colosim-resctrl-emu) mounts the emulated resctrl over FUSE at
#     WORKDIR/resctrl and runs in the background until this process dies;
#  2. WORKDIR/mounts = this process's /proc/mounts plus the line
#     "resctrl WORKDIR/resctrl resctrl rw,relatime 0 0", bind-mounted over
#     /proc/<this pid>/mounts: goresctrl finds resctrl through /proc/mounts
#     (its first line whose type is "resctrl"), and a FUSE mount shows as
#     "fuse.resctrl" there, so this line is the one thing that is faked;
#  3. exec COMMAND: same pid, so its /proc/self/mounts is the file above.
set -eu
work=$1
emu=$2
shift 2
emu_args=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    emu_args="$emu_args $1"   # (no spaces inside emulator arguments)
    shift
done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || { echo "usage: $0 WORKDIR EMULATOR [ARGS...] -- COMMAND [ARGS...]" >&2; exit 2; }

if [ "$(readlink /proc/$$/ns/mnt)" = "$(readlink /proc/1/ns/mnt)" ]; then
    echo "with-emulated-resctrl.sh: refusing to run in the host's mount namespace (use unshare -m)" >&2
    exit 2
fi

mnt=$work/resctrl
mkdir -p "$mnt"
rm -f "$work/ready"
# shellcheck disable=SC2086
"$emu" --mount "$mnt" --ready "$work/ready" --parent $$ $emu_args &
i=0
while [ ! -e "$work/ready" ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 $! 2>/dev/null; then
        echo "with-emulated-resctrl.sh: the emulator did not mount $mnt" >&2
        exit 1
    fi
    sleep 0.025
done
{ cat /proc/$$/mounts; echo "resctrl $mnt resctrl rw,relatime 0 0"; } > "$work/mounts"
mount --bind "$work/mounts" /proc/$$/mounts
exec "$@"
