"""`colosim trace --perfetto` (results/perfetto.py): the file decodes with
Perfetto's own message classes into what the sched table holds, loads into
Perfetto's trace processor where its shell can be had, and a path that
cannot be written is one line and leaves nothing behind."""
import collections

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from cli.main import main
from results.perfetto import PREV_STATE, write_perfetto
from results.rundir import umask
from results.sched import read_sched, throttled_periods


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A dense simulated run: preemption, migrations and cpu.max throttling."""
    out = tmp_path_factory.mktemp("perfetto") / "run"
    assert main(["run", "duration_s=1", "warmup_s=0.2", "trace=sched", "workload.functions=60",
                 "workload.rate_rps=10", "workload.quota_us=20000", f"output_dir={out}"]) == 0
    return out, read_sched(out).to_pandas()


def _decode(path) -> pb.Trace:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


def test_the_file_holds_the_schedule_as_ftrace_events(traced, tmp_path):
    run, sched = traced
    out = write_perfetto(read_sched(run), tmp_path / "t.pftrace")
    trace = _decode(out)
    by_kind = collections.Counter()
    per_cpu = collections.Counter()
    states = collections.Counter()
    for packet in trace.packet:
        if packet.HasField("ftrace_events"):
            for e in packet.ftrace_events.event:
                kind = e.WhichOneof("event")
                by_kind[kind] += 1
                if kind == "sched_switch":
                    per_cpu[packet.ftrace_events.cpu] += 1
                    states[e.sched_switch.prev_state] += 1
    switches = sched[sched["event"] == "sched_switch"]
    assert per_cpu == collections.Counter(switches["cpu"].tolist())
    assert by_kind["sched_waking"] == (sched["event"] == "sched_wakeup").sum()
    assert by_kind["sched_wakeup_new"] == (sched["event"] == "sched_wakeup_new").sum()
    assert by_kind["sched_migrate_task"] == (sched["event"] == "sched_migrate_task").sum() > 0
    assert states == collections.Counter(PREV_STATE[s] for s in switches["prev_state"])
    # cgroups are processes named by their path, tasks their threads
    tree = next(p.process_tree for p in trace.packet if p.HasField("process_tree"))
    names = {p.pid: p.cmdline[0] for p in tree.processes}
    tasks = sched[sched["next_pid"] > 0].drop_duplicates("next_pid", keep="last")
    assert {t.tid: names[t.tgid] for t in tree.threads} == dict(
        zip(tasks["next_pid"], tasks["next_cgroup"]))
    # throttling: one slice per throttled period of a cfs_rq
    begins = [p.track_event for p in trace.packet if p.HasField("track_event")
              and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    throttled = [b for b in begins if b.name == "throttled"]
    periods = throttled_periods(sched, int(sched.time_ns.min()), int(sched.time_ns.max()) + 1)
    assert len(throttled) == len(periods) >= (sched["event"] == "unthrottle_cfs_rq").sum() > 0
    costs = [b for b in begins if b.name == "switch"]
    assert len(costs) == len(switches)
    assert sorted(a.int_value for b in costs for a in b.debug_annotations
                  if a.name == "cost_ns") == sorted(switches["cost_ns"].astype(int))


def _trace_processor_shell():
    """Perfetto's own trace_processor_shell, as its Python package gets it
    (a download, which fails without the network: then the test skips)."""
    from perfetto.trace_processor.platform import PlatformDelegate
    try:
        return PlatformDelegate().get_shell_path(None)
    # curl's failure (CalledProcessError), or the plain Exception it raises
    # for a platform without a prebuilt
    except Exception as err:
        pytest.skip(f"no trace_processor_shell here (the perfetto package downloads it): {err}")


def test_perfettos_trace_processor_reads_the_schedule(traced, tmp_path):
    shell = _trace_processor_shell()
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    run, sched = traced
    out = write_perfetto(read_sched(run), tmp_path / "t.pftrace")
    switches = sched[sched["event"] == "sched_switch"]
    with TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=shell)) as tp:
        slices = tp.query("select cpu, count(*) as n from sched where utid != 0 "
                          "group by cpu").as_pandas_dataframe()
        running = tp.query("select t.tid, count(*) as n from thread_state s join thread t "
                           "using (utid) where s.state = 'Running' and t.tid != 0 "
                           "group by t.tid").as_pandas_dataframe()
        cgroups = tp.query("select t.tid, p.cmdline from thread t join process p using (upid) "
                           "where t.tid != 0").as_pandas_dataframe()
    into_task = switches[switches["next_pid"] > 0]
    assert dict(zip(slices["cpu"], slices["n"])) == into_task["cpu"].value_counts().to_dict()
    assert dict(zip(running["tid"], running["n"])) == into_task["next_pid"].value_counts().to_dict()
    names = dict(zip(cgroups["tid"], cgroups["cmdline"]))
    assert all(names[p] == c for p, c in zip(into_task["next_pid"], into_task["next_cgroup"]))


def test_an_unwritable_perfetto_path_is_one_line_and_leaves_nothing(traced, tmp_path, capsys):
    run, _ = traced
    for bad in (tmp_path / "missing" / "t.pftrace", tmp_path):   # no directory; a directory
        capsys.readouterr()
        assert main(["trace", str(run), "--perfetto", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_writing_replaces_an_old_file_whole(traced, tmp_path):
    run, _ = traced
    out = tmp_path / "t.pftrace"
    out.write_bytes(b"old")
    write_perfetto(read_sched(run), out)
    assert len(_decode(out).packet) > 10
    assert [p.name for p in tmp_path.iterdir()] == ["t.pftrace"]
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask()
