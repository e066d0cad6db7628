"""cgroupfs v1/v2 path and spelling translation, the path guard, preflight
and cleanup, against a fake cgroupfs in a temp dir (no root, no kernel)."""
import json
import os

import pytest

from backends.real import cgroupfs
from backends.real.cgroupfs import (CgroupError, CgroupFS, PathGuardError, check_owned,
                                    cpu_stat_from, parse_mounts, shares_to_weight,
                                    weight_to_shares)


def fake_v1(tmp_path, with_cpuset=True):
    lines = []
    for c in ("cpu", "cpuacct") + (("cpuset",) if with_cpuset else ()):
        d = tmp_path / c
        d.mkdir()
        lines.append(f"cgroup {d} cgroup rw,nosuid,nodev,noexec,relatime,{c} 0 0")
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-3\n") if with_cpuset else None
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n") if with_cpuset else None
    u = tmp_path / "unified"
    u.mkdir()
    lines.append(f"cgroup2 {u} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
    return "\n".join(lines) + "\n", {str(u): []}


def fake_v2(tmp_path, enabled="cpu cpuset"):
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.subtree_control").write_text(enabled + "\n")
    text = f"cgroup2 {root} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
    return text, {str(root): ["cpuset", "cpu", "io", "memory", "pids"]}


def make(tmp_path, text, v2c, run="t1"):
    return CgroupFS(run, mounts_text=text, v2_controllers=v2c, require_root=False,
                    cleanup_on_exit=False)


def test_parse_mounts_v1_comounted_and_v2():
    text = ("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
            "cgroup /sys/fs/cgroup/systemd cgroup rw,xattr,name=systemd 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n"
            "proc /proc proc rw 0 0\n")
    ms = parse_mounts(text, {"/sys/fs/cgroup/unified": []})
    assert [m.version for m in ms] == [1, 1, 2]
    assert ms[0].controllers == {"cpu", "cpuacct"}
    lay = cgroupfs.Layout.from_mounts(ms)
    assert lay.by_controller["cpu"] is lay.by_controller["cpuacct"]
    assert lay.by_controller["perf_event"].version == 2
    assert "cpuset" not in lay.by_controller


def test_v1_spelling(tmp_path):
    text, v2c = fake_v1(tmp_path)
    cg = make(tmp_path, text, v2c)
    cg.create("/faas.slice/func-1")
    for h in ("cpu", "cpuacct", "cpuset", "unified"):
        assert (tmp_path / h / "colosim-t1" / "faas.slice" / "func-1").is_dir()
    leaf = tmp_path / "cpu" / "colosim-t1" / "faas.slice" / "func-1"
    # a new v1 cpuset inherits cpus and mems
    assert (tmp_path / "cpuset/colosim-t1/faas.slice/func-1/cpuset.cpus").read_text() == "0-3"
    assert (tmp_path / "cpuset/colosim-t1/cpuset.mems").read_text() == "0"
    cg.set_weight("/faas.slice/func-1", 50)
    assert (leaf / "cpu.shares").read_text() == "512"
    (leaf / "cpu.cfs_burst_us").write_text("0")
    cg.set_cpu_max("faas.slice/func-1", 20_000, 100_000, 5_000)
    assert (leaf / "cpu.cfs_quota_us").read_text() == "20000"
    assert (leaf / "cpu.cfs_period_us").read_text() == "100000"
    assert (leaf / "cpu.cfs_burst_us").read_text() == "5000"
    assert cg.cpu_max("/faas.slice/func-1") == (20_000, 100_000, 5_000)
    cg.set_cpu_max("/faas.slice/func-1", None, 50_000)
    assert (leaf / "cpu.cfs_quota_us").read_text() == "-1"
    assert (leaf / "cpu.cfs_burst_us").read_text() == "0"
    assert cg.cpu_max("/faas.slice/func-1") == (None, 50_000, 0)
    cg.set_cpuset("/faas.slice/func-1", "1", "0")
    cs = tmp_path / "cpuset/colosim-t1/faas.slice/func-1"
    assert (cs / "cpuset.cpus").read_text() == "1" and (cs / "cpuset.mems").read_text() == "0"
    cg.attach("/faas.slice/func-1", 4242)
    for h in ("cpu", "cpuacct", "cpuset", "unified"):
        assert (tmp_path / h / "colosim-t1/faas.slice/func-1/cgroup.procs").read_text() == "4242"
    cg.attach_thread("/faas.slice/func-1", 4243)
    assert (leaf / "tasks").read_text() == "4243"
    assert (tmp_path / "unified/colosim-t1/faas.slice/func-1/cgroup.threads").read_text() == "4243"
    (tmp_path / "cpuacct/colosim-t1/faas.slice/func-1/cpuacct.usage").write_text("123456789\n")
    assert cg.usage_ns("/faas.slice/func-1") == 123456789
    (leaf / "cpu.stat").write_text("nr_periods 30\nnr_throttled 29\nthrottled_time 2500000\n"
                                   "nr_bursts 0\nburst_time 0\n")
    st = cg.cpu_stat("/faas.slice/func-1")
    assert (st.nr_periods, st.nr_throttled, st.throttled_usec) == (30, 29, 2500)
    assert cg.perf_name("/faas.slice/func-1") == "colosim-t1/faas.slice/func-1"
    with pytest.raises(CgroupError, match="refusing to attach the colosim process"):
        cg.attach("/faas.slice/func-1", os.getpid())


def test_v2_spelling(tmp_path):
    text, v2c = fake_v2(tmp_path)
    cg = make(tmp_path, text, v2c)
    cg.create("/faas.slice/func-2")
    top = tmp_path / "cg2" / "colosim-t1"
    leaf = top / "faas.slice" / "func-2"
    assert leaf.is_dir()
    # controllers enabled for children inside the tree only
    assert (top / "cgroup.subtree_control").read_text() == "+cpu +cpuset"
    assert (top / "faas.slice" / "cgroup.subtree_control").read_text() == "+cpu +cpuset"
    assert (tmp_path / "cg2" / "cgroup.subtree_control").read_text() == "cpu cpuset\n"
    cg.set_weight("/faas.slice/func-2", 200)
    assert (leaf / "cpu.weight").read_text() == "200"
    cg.set_shares("/faas.slice/func-2", 2048)
    assert (leaf / "cpu.weight").read_text() == "200"
    (leaf / "cpu.max.burst").write_text("0")
    cg.set_cpu_max("/faas.slice/func-2", 20_000, 100_000, 1000)
    assert (leaf / "cpu.max").read_text() == "20000 100000"
    assert (leaf / "cpu.max.burst").read_text() == "1000"
    cg.set_cpu_max("/faas.slice/func-2", None, 100_000)
    assert (leaf / "cpu.max").read_text() == "max 100000"
    assert cg.cpu_max("/faas.slice/func-2") == (None, 100_000, 0)
    cg.set_cpuset("/faas.slice/func-2", "0-1")
    assert (leaf / "cpuset.cpus").read_text() == "0-1"
    assert not (leaf / "cpuset.mems").exists()
    (leaf / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"
                                   "nr_periods 10\nnr_throttled 4\nthrottled_usec 777\n")
    assert cg.usage_ns("/faas.slice/func-2") == 1_500_000
    st = cg.cpu_stat("/faas.slice/func-2")
    assert (st.nr_periods, st.nr_throttled, st.throttled_usec) == (10, 4, 777)
    # one thread of a process in the top moves to a leaf once the path is threaded
    cg.make_threaded("/faas.slice/func-2")
    assert (leaf / "cgroup.type").read_text() == "threaded"
    assert (top / "faas.slice" / "cgroup.type").read_text() == "threaded"
    assert not (top / "cgroup.type").exists()      # the top stays a domain
    cg.attach_thread("/faas.slice/func-2", 99)
    assert (leaf / "cgroup.threads").read_text() == "99"
    assert cg.perf_name("") == "colosim-t1"


def test_remove_bottom_up(tmp_path):
    # The fake's "cgroups" are plain dirs holding files, so remove() fails on
    # them; check the order on empty dirs instead.
    text, v2c = fake_v2(tmp_path, enabled="cpu cpuset")
    cg = make(tmp_path, text, v2c)
    top = tmp_path / "cg2" / "colosim-t1"
    (top / "a" / "b").mkdir(parents=True)
    (top / "c").mkdir()
    removed, killed = cg.remove()
    assert removed[-1] == top and removed[0] == top / "a" / "b"
    assert killed == [] and not top.exists()


def test_weight_shares_conversion():
    assert weight_to_shares(100) == 1024
    assert weight_to_shares(200) == 2048
    assert weight_to_shares(1) == 10
    assert shares_to_weight(1024) == 100
    assert shares_to_weight(2) == 1
    assert cpu_stat_from({"nr_periods": 1, "nr_throttled": 1,
                          "throttled_time": 1999}).throttled_usec == 1


def test_path_guard(tmp_path):
    text, v2c = fake_v1(tmp_path)
    ms = parse_mounts(text, v2c)
    cpu = tmp_path / "cpu"
    assert check_owned(cpu / "colosim-x" / "cpu.shares", ms) == cpu / "colosim-x" / "cpu.shares"
    assert check_owned(cpu / "colosim-x", ms) == cpu / "colosim-x"
    for bad in (cpu / "cpu.shares", cpu / "other" / "cpu.shares", cpu / "colosim-",
                cpu / "colosim-x" / ".." / "cpu.shares", cpu / "sub" / "colosim-x" / "tasks",
                tmp_path / "elsewhere" / "colosim-x" / "f", "/etc/passwd"):
        with pytest.raises(PathGuardError, match="refusing to write"):
            check_owned(bad, ms)
    cg = make(tmp_path, text, v2c)
    with pytest.raises(PathGuardError):
        cg._write(cpu / "cpu.shares", "2")
    assert not (cpu / "cpu.shares").exists()
    with pytest.raises(ValueError, match=r"'\.\.'"):
        cg.create("/faas/../../etc")


def test_preflight_names_what_is_missing(tmp_path, monkeypatch):
    text, v2c = fake_v1(tmp_path, with_cpuset=False)
    with pytest.raises(CgroupError, match="the cpuset controller") as e:
        make(tmp_path, text, v2c)
    assert not any(p.name.startswith("colosim-") for p in tmp_path.rglob("*"))
    assert "mounted: v1: cpu,cpuacct" in str(e.value)
    t2, c2 = fake_v2(tmp_path, enabled="memory")
    with pytest.raises(CgroupError, match=r"cpu controller enabled for children.*echo \+cpu"):
        make(tmp_path, t2, c2)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    sub = tmp_path / "x"
    sub.mkdir()
    text, v2c = fake_v1(sub)
    with pytest.raises(CgroupError, match=r"root \(running as uid 1000"):
        CgroupFS("t2", mounts_text=text, v2_controllers=v2c, cleanup_on_exit=False)


def test_leftovers_found_in_every_hierarchy(tmp_path):
    text, v2c = fake_v1(tmp_path)
    lay = cgroupfs.Layout.from_mounts(parse_mounts(text, v2c))
    for h in ("cpu", "cpuset", "unified"):
        (tmp_path / h / "colosim-dead" / "f").mkdir(parents=True)
    (tmp_path / "cpu" / "not-ours").mkdir()
    found = cgroupfs.find_leftovers(lay)
    assert sorted(p.parent.name for p in found) == ["cpu", "cpuset", "unified"]
    [dead] = cgroupfs.leftovers(lay, owners=tmp_path / "owners")
    assert dead.tree == "colosim-dead" and dead.owner is None and not dead.live
    for d in dead.dirs:
        removed, killed = cgroupfs.remove_tree(d, lay)
        assert len(removed) == 2 and killed == []
    assert (tmp_path / "cpu" / "not-ours").is_dir()
    assert cgroupfs.find_leftovers(lay) == []


def test_leftovers_know_live_owners_and_the_name_the_user_gave(tmp_path):
    """`colosim cleanup` must not take a live run's cgroups for leftovers,
    and --run takes the name the user gave the run (output_dir's name)."""
    text, v2c = fake_v1(tmp_path)
    lay = cgroupfs.Layout.from_mounts(parse_mounts(text, v2c))
    owners = tmp_path / "owners"
    live, dead = cgroupfs.tree_name("my run"), cgroupfs.tree_name("my run")
    for tree in (live, dead, "old"):
        (tmp_path / "cpu" / f"colosim-{tree}").mkdir(parents=True)
    cgroupfs.record_owner(f"colosim-{live}", "my run", owners)     # this process: live
    cgroupfs.record_owner(f"colosim-{dead}", "my run", owners)
    gone = json.loads((owners / f"colosim-{dead}.json").read_text())
    (owners / f"colosim-{dead}.json").write_text(json.dumps({**gone, "start": gone["start"] - 1}))
    found = {f.tree: f for f in cgroupfs.leftovers(lay, owners=owners)}
    assert {t: f.live for t, f in found.items()} == {
        f"colosim-{live}": True, f"colosim-{dead}": False, "colosim-old": False}
    # the given name (with its space), the tree's name with or without the prefix
    assert {f.tree for f in cgroupfs.leftovers(lay, "my run", owners)} == {
        f"colosim-{live}", f"colosim-{dead}"}
    assert [f.tree for f in cgroupfs.leftovers(lay, dead, owners)] == [f"colosim-{dead}"]
    assert [f.tree for f in cgroupfs.leftovers(lay, "colosim-old", owners)] == ["colosim-old"]
    assert cgroupfs.leftovers(lay, "other", owners) == []
    # without its record (e.g. written by an older colosim) the tree name
    # still carries the given name
    (owners / f"colosim-{dead}.json").unlink()
    assert [f.tree for f in cgroupfs.leftovers(lay, "my run", owners) if not f.live] == [
        f"colosim-{dead}"]


def test_run_name_checked(tmp_path):
    text, v2c = fake_v1(tmp_path)
    with pytest.raises(ValueError, match="run name"):
        make(tmp_path, text, v2c, run="../x")


def _fake_sysfs(tmp_path, topology):
    """/sys/devices/system/cpu with cpuN/topology/{physical_package_id,core_id}."""
    root = tmp_path / "sys-cpu"
    for cpu, (pkg, core) in topology.items():
        t = root / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{pkg}\n")
        (t / "core_id").write_text(f"{core}\n")
    return root


def test_real_host_cpu_sets_group_the_run_cpus_by_node_and_llc(tmp_path):
    """RealHost.cpu_sets (workload.cpuset_spread on the real host): the
    run's CPUs grouped by their sysfs nodeN link or L3 id; a CPU without
    either counts as node / LLC 0."""
    from backends.real.host import RealHost
    text, v2c = fake_v1(tmp_path)
    host = RealHost(make(tmp_path, text, v2c), ["/faas.slice/func-1"])
    sysfs = _fake_sysfs(tmp_path, {c: (0, c) for c in range(4)})
    assert host.cpu_sets("node", sysfs) == [{0, 1, 2, 3}]
    assert host.cpu_sets("llc", sysfs) == [{0, 1, 2, 3}]
    for cpu, node, llc in ((0, 0, 4), (1, 1, 4), (2, 0, 9), (3, 1, 9)):
        (sysfs / f"cpu{cpu}" / f"node{node}").mkdir()
        (sysfs / f"cpu{cpu}" / "cache" / "index3").mkdir(parents=True)
        (sysfs / f"cpu{cpu}" / "cache" / "index3" / "id").write_text(f"{llc}\n")
    assert host.cpu_sets("node", sysfs) == [{0, 2}, {1, 3}]
    assert host.cpu_sets("llc", sysfs) == [{0, 1}, {2, 3}]


def test_real_host_cores_by_socket_and_cpuset_on_a_fake_tree(tmp_path):
    """RealHost's placement levers over the fake v1 tree (cpus 0-3): SMT
    siblings grouped per core and socket from sysfs; set_cpuset writes the
    cpulist, None gives back the run's CPUs, and CPUs outside the run or an
    empty set are refused before anything is written."""
    from backends.real.host import RealHost
    text, v2c = fake_v1(tmp_path)
    cg = make(tmp_path, text, v2c)
    host = RealHost(cg, ["/faas.slice/func-1"])
    assert host.run_cpus() == {0, 1, 2, 3}
    # two sockets, each one core with two hardware threads (0,2 and 1,3)
    sysfs = _fake_sysfs(tmp_path, {0: (0, 0), 1: (1, 0), 2: (0, 0), 3: (1, 0)})
    assert host.cores_by_socket(sysfs) == {0: [(0, 2)], 1: [(1, 3)]}
    cpus = tmp_path / "cpuset/colosim-t1/faas.slice/func-1/cpuset.cpus"
    host.set_cpuset("/faas.slice/func-1", {3, 2})
    assert cpus.read_text() == "2-3"
    host.set_cpuset("/faas.slice/func-1", None)
    assert cpus.read_text() == "0-3"
    with pytest.raises(ValueError, match="names CPUs the host does not have"):
        host.set_cpuset("/faas.slice/func-1", {4})
    with pytest.raises(ValueError, match="leaves no CPU"):
        host.set_cpuset("/faas.slice/func-1", set())
    with pytest.raises(ValueError, match="no cgroup /nope"):
        host.set_cpuset("/nope", {0})
    assert cpus.read_text() == "0-3"
