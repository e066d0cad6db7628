"""sched.parquet as a Perfetto trace (`colosim trace RUN_DIR --perfetto OUT`;
docs/tracing.md).

The trace is Perfetto's own protobuf (the message classes of the
``perfetto`` package), written as a kernel trace would be: the schedule
as ftrace events (``sched_switch``, ``sched_waking`` for a wake-up,
``sched_wakeup_new``, ``sched_migrate_task``) in one FtraceEventBundle per
CPU and chunk, so Perfetto's trace processor builds its ``sched`` (a track
per CPU with the running task) and ``thread_state`` (running, runnable,
sleeping per task) tables exactly as from a real one.  Each cgroup is a
process named after its path, with its tasks as threads (a ProcessTree),
so the UI groups tasks by cgroup.  What ftrace has no event for is
TrackEvent slices on tracks of their own: a cfs_rq's throttling
(``throttle_cfs_rq`` to ``unthrottle_cfs_rq``) as a "throttled" slice on a
track per cgroup and CPU under the cgroup's process, and each context
switch's charged cost as a "switch" slice of that length with ``cost_ns``,
``prev`` and ``next`` as args on a track per CPU (simulated runs only: the
real host has no cost column).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from results.readers import ResultsError
from results.rundir import umask
from results.sched import throttled_periods

# ftrace's prev_state bits (include/trace/events/sched.h since Linux 4.14:
# TASK_REPORT order): R is 0, S 1, X EXIT_DEAD; decoded by the kernel
# version in the trace's SystemInfo
PREV_STATE = {"R": 0, "S": 1, "D": 2, "X": 16}
KERNEL_RELEASE = "6.6.0"
PRIO = 120               # nice 0: the trace has no priorities
CHUNK = 10_000           # events per FtraceEventBundle
SEQUENCE = 1             # the TrackEvent packets' trusted sequence


class PerfettoError(ResultsError):
    """The Perfetto file cannot be written; one line naming it."""


def write_perfetto(sched: pa.Table, out: str | Path) -> Path:
    """Write ``sched`` (a SCHED table) to ``out`` as a Perfetto trace.  The
    file appears whole or not at all (written beside it, then renamed)."""
    out = Path(out)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as err:
        raise PerfettoError(f"cannot write {out}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            _write(sched, StreamingTraceProtoBuilder(f))
        os.chmod(tmp, 0o666 & ~umask())     # mkstemp's file is private: an ordinary file's mode
        os.replace(tmp, out)
    except OSError as err:
        raise PerfettoError(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _write(sched: pa.Table, builder: StreamingTraceProtoBuilder) -> None:
    cols = {name: sched.column(name).to_numpy(zero_copy_only=False) for name in sched.column_names}
    packet = builder.create_packet()
    packet.system_info.utsname.sysname = "Linux"
    packet.system_info.utsname.release = KERNEL_RELEASE
    builder.write_packet(packet)
    cgroup_pid = _process_tree(sched, builder)
    _ftrace(cols, builder)
    _track_events(cols, sched, cgroup_pid, builder)


def _tasks(sched: pa.Table) -> dict[int, tuple[str, str | None]]:
    """pid -> (comm, cgroup) as last seen, the idle task left out."""
    tasks = {}
    for side in ("prev", "next"):
        t = sched.select([f"{side}_pid", f"{side}_comm", f"{side}_cgroup"])
        t = t.filter(pc.fill_null(pc.greater(t.column(0), 0), False))
        for pid, comm, cgroup in zip(*(c.to_pylist() for c in t.columns)):
            tasks[pid] = (comm, cgroup)
    return tasks


def _process_tree(sched: pa.Table, builder) -> dict[str, int]:
    """A process per cgroup (pids above every task's, named by the cgroup's
    path) with its tasks as threads; returns cgroup -> its process's pid."""
    tasks = _tasks(sched)
    cgroups = sorted({c for _, c in tasks.values()} | set(
        sched.column("next_cgroup").drop_null().unique().to_pylist()), key=str)
    base = max(tasks, default=0) + 1
    cgroup_pid = {c: base + i for i, c in enumerate(cgroups)}
    packet = builder.create_packet()
    tree = packet.process_tree
    for cgroup, pid in cgroup_pid.items():
        tree.processes.add(pid=pid, ppid=0, cmdline=[str(cgroup)])
    for tid, (comm, cgroup) in sorted(tasks.items()):
        tree.threads.add(tid=tid, tgid=cgroup_pid[cgroup], name=comm or "")
    builder.write_packet(packet)
    return cgroup_pid


def _common_pids(cols: dict) -> np.ndarray:
    """Per row, the task the event runs in (ftrace's common pid): a switch's
    prev, else the task the CPU last switched to (0, idle, before any).  The
    simulator has no waker, so a wake-up is its target CPU's current task's
    doing."""
    n = cols["event"].size
    switch = cols["event"] == "sched_switch"
    order = np.lexsort((np.arange(n), cols["cpu"]))       # per CPU, in trace order
    cpu, sw = cols["cpu"][order], switch[order]
    group_start = np.maximum.accumulate(np.where(np.r_[True, cpu[1:] != cpu[:-1]],
                                                 np.arange(n), 0))
    last = np.maximum.accumulate(np.where(sw, np.arange(n), -1))
    nxt = np.nan_to_num(cols["next_pid"][order].astype(float)).astype(np.int64)
    current = np.where(last >= group_start, nxt[np.maximum(last, 0)], 0)
    prev = np.nan_to_num(cols["prev_pid"][order].astype(float)).astype(np.int64)
    out = np.empty(n, np.int64)
    out[order] = np.where(sw, prev, current)
    return out


def _ftrace(cols: dict, builder) -> None:
    """One FtraceEventBundle per CPU and CHUNK events, in trace order."""
    keep = np.isin(cols["event"], ["sched_switch", "sched_wakeup", "sched_wakeup_new",
                                   "sched_migrate_task"])
    common = _common_pids(cols)
    for cpu in np.unique(cols["cpu"][keep]):
        rows = np.flatnonzero(keep & (cols["cpu"] == cpu))
        for start in range(0, rows.size, CHUNK):
            packet = builder.create_packet()
            packet.ftrace_events.cpu = int(cpu)
            packet.ftrace_events.event.extend(_event(cols, int(r), int(common[r]))
                                              for r in rows[start:start + CHUNK])
            builder.write_packet(packet)


def _event(cols: dict, r: int, current: int) -> pb.FtraceEvent:
    kind, t = cols["event"][r], int(cols["time_ns"][r])
    comm, pid = cols["next_comm"][r] or "", int(cols["next_pid"][r])
    if kind == "sched_switch":
        return pb.FtraceEvent(timestamp=t, pid=current, sched_switch=pb.SchedSwitchFtraceEvent(
            prev_comm=cols["prev_comm"][r] or "", prev_pid=int(cols["prev_pid"][r]),
            prev_prio=PRIO, prev_state=PREV_STATE[cols["prev_state"][r]],
            next_comm=comm, next_pid=pid, next_prio=PRIO))
    if kind == "sched_migrate_task":
        return pb.FtraceEvent(timestamp=t, pid=current, sched_migrate_task=pb.SchedMigrateTaskFtraceEvent(
            comm=comm, pid=pid, prio=PRIO, orig_cpu=int(cols["orig_cpu"][r]),
            dest_cpu=int(cols["cpu"][r])))
    woken = dict(comm=comm, pid=pid, prio=PRIO, success=1, target_cpu=int(cols["cpu"][r]))
    if kind == "sched_wakeup_new":
        return pb.FtraceEvent(timestamp=t, pid=current,
                              sched_wakeup_new=pb.SchedWakeupNewFtraceEvent(**woken))
    return pb.FtraceEvent(timestamp=t, pid=current, sched_waking=pb.SchedWakingFtraceEvent(**woken))


def _track_events(cols: dict, sched: pa.Table, cgroup_pid: dict, builder) -> None:
    """The throttling and switch-cost slices, and the tracks they are on."""
    uuid = iter(range(1, 1 << 62))
    state = {"first": True}

    def packet(ts: int | None = None) -> pb.TracePacket:
        p = builder.create_packet()
        p.trusted_packet_sequence_id = SEQUENCE
        if state.pop("first", False):
            p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        if ts is not None:
            p.timestamp = ts
        return p

    def track(descriptor: pb.TrackDescriptor) -> int:
        p = packet()
        p.track_descriptor.MergeFrom(descriptor)
        p.track_descriptor.uuid = u = next(uuid)
        builder.write_packet(p)
        return u

    def slice_(track_uuid: int, begin: int, end: int, name: str, args: dict) -> None:
        p = packet(begin)
        p.track_event.MergeFrom(pb.TrackEvent(
            type=pb.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=track_uuid, name=name,
            debug_annotations=[pb.DebugAnnotation(name=k, **v) for k, v in args.items()]))
        builder.write_packet(p)
        p = packet(end)
        p.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        p.track_event.track_uuid = track_uuid
        builder.write_packet(p)

    event, cpu, time_ns = cols["event"], cols["cpu"], cols["time_ns"]
    process = {c: track(pb.TrackDescriptor(process=pb.ProcessDescriptor(
        pid=pid, process_name=str(c)))) for c, pid in cgroup_pid.items()}
    # throttling: a slice per throttled period of a cgroup's cfs_rq on a CPU
    throttled: dict = {}        # (cgroup, cpu) -> track
    periods = throttled_periods(
        sched.select(["time_ns", "event", "cpu", "next_cgroup"]).to_pandas(),
        int(time_ns.min()), int(time_ns.max()) + 1) if len(time_ns) else []
    for p in periods.itertuples() if len(time_ns) else ():
        key = (p.cgroup, int(p.cpu))
        if key not in throttled:
            throttled[key] = track(pb.TrackDescriptor(parent_uuid=process[key[0]],
                                                      name=f"throttled cpu{key[1]}"))
        slice_(throttled[key], int(p.start_ns), int(p.end_ns), "throttled", {})
    # context switches with their charged cost (null on a real host)
    cost = cols["cost_ns"].astype(float)
    charged = np.flatnonzero((event == "sched_switch") & ~np.isnan(cost))
    per_cpu = {int(c): track(pb.TrackDescriptor(name=f"cpu{int(c)} switch cost"))
               for c in np.unique(cpu[charged])}
    for r in charged:
        t, ns = int(time_ns[r]), int(cost[r])
        slice_(per_cpu[int(cpu[r])], t, t + ns, "switch", {
            "cost_ns": {"int_value": ns},
            "prev": {"string_value": f"{cols['prev_comm'][r]} ({int(cols['prev_pid'][r])})"},
            "next": {"string_value": f"{cols['next_comm'][r]} ({int(cols['next_pid'][r])})"}})
