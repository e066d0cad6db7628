"""The memory model (sim/memory): resctrl semantics, slice hashing, page layouts,
the per-bucket miss model against theory, way sharing and bandwidth sharing."""
from __future__ import annotations

import errno

import numpy as np
import pytest
import yaml

from sim.memory import (Buffer, LLCGeometry, RdtInfo, Resctrl, ResctrlError, Tenant, bucket_demand,
                        frame_layout, line_addresses, make_slice_hash, miss_profile, miss_ratio,
                        occupancy_lines, parse_page_size, share_bandwidth, solve_socket)
from sim.memory.cachemodel import binomial_random_miss_ratio, poisson_random_miss_ratio
from sim.memory.contention import segments
from tests.simcfg import HOSTS

MIB = 1 << 20


def preset(name: str) -> dict:
    with open(f"scenarios/conf/host/{name}.yaml") as f:
        return yaml.safe_load(f)


SILVER = preset("silver-4314-2s")


@pytest.fixture
def rc() -> Resctrl:
    return Resctrl.from_host(SILVER)


def rejected(rc: Resctrl, call, *args) -> ResctrlError:
    with pytest.raises(ResctrlError) as e:
        call(*args)
    assert rc.last_cmd_status == e.value.status
    return e.value


# ---- geometry and presets -----------------------------------------------------------------

def test_silver_geometry_matches_the_thesis():
    g = LLCGeometry.from_host(SILVER)
    assert (g.size_bytes, g.ways, g.slices, g.sets, g.line_bytes) == (24 * MIB, 12, 16, 2048, 64)
    assert g.way_bytes == 2 * MIB and g.buckets == 16 * 2048


@pytest.mark.parametrize("name", ["generic", "e5-2430l", "epyc-7453", "silver-4314-2s", "this-vm"])
def test_every_preset_has_a_whole_geometry(name):
    host = preset(name)
    g = LLCGeometry.from_host(host)
    assert g.sets * g.ways * g.slices * 64 == g.size_bytes
    assert host["mem_bw_gbps"] > 0
    RdtInfo.from_host(host)


def test_test_hosts_have_the_memory_keys():
    for host in HOSTS.values():
        LLCGeometry.from_host(host)
        RdtInfo.from_host(host)


def test_geometry_rejects_fractional_sets():
    with pytest.raises(ValueError, match="whole number of sets"):
        LLCGeometry(size_bytes=24 * MIB, ways=11, slices=16)


# ---- resctrl --------------------------------------------------------------------------------

def test_root_group_owns_everything(rc):
    assert rc.schemata("system/default") == "L3:0=fff;1=fff\nMB:0=100;1=100\n"
    assert rc.info_files()["info/L3/cbm_mask"] == "fff"
    assert rc.info_files()["info/MB/bandwidth_gran"] == "10"
    rc.mkdir("p0")
    assert rc.schemata("p0") == "L3:0=fff;1=fff\nMB:0=100;1=100\n"   # all bits shareable


@pytest.mark.parametrize("mask,status", [
    ("5", "The mask 5 has non-consecutive 1-bits"),
    ("a05", "The mask a05 has non-consecutive 1-bits"),
    ("0", "Mask out of range"),
    ("1fff", "Mask out of range"),
    ("xyz", "Non-hex character in the mask xyz"),
])
def test_invalid_masks_are_rejected_with_resctrls_words(rc, mask, status):
    rc.mkdir("p0")
    e = rejected(rc, rc.write_schemata, "p0", f"L3:0={mask}\n")
    assert e.errno == errno.EINVAL and rc.last_cmd_status == status
    assert rc.cbm("p0", 0) == 0xfff


def test_contiguous_masks_are_accepted(rc):
    rc.mkdir("p0")
    for mask in ("3", "6", "c", "0x3f0", "800"):
        rc.write_schemata("p0", f"L3:1={mask}\n")
        assert rc.last_cmd_status == "ok"
    assert rc.cbm("p0", 1) == 0x800 and rc.cbm("p0", 0) == 0xfff


def test_min_cbm_bits():
    rc = Resctrl(RdtInfo(cbm_len=20, num_closids=4, min_cbm_bits=2))   # Haswell
    rc.mkdir("p0")
    rejected(rc, rc.write_schemata, "p0", "L3:0=8")
    assert rc.last_cmd_status == "Need at least 2 bits in the mask"
    rc.write_schemata("p0", "L3:0=18")


def test_closid_exhaustion(rc):
    for i in range(15):                      # 16 CLOSIDs, the root holds closid 0
        rc.mkdir(f"c{i}")
    e = rejected(rc, rc.mkdir, "one-too-many")
    assert e.errno == errno.ENOSPC and rc.last_cmd_status == "Out of CLOSIDs"
    rc.rmdir("c3")
    rc.mkdir("one-too-many")                 # takes the freed closid


def test_mb_granularity_and_range(rc):
    rc.mkdir("p0")
    rc.write_schemata("p0", "MB:0=15;1=100\n")
    assert rc.mb("p0", 0) == 20 and rc.mba_fraction("p0", 0) == pytest.approx(0.2)
    assert rc.schemata("p0").endswith("MB:0= 20;1=100\n")
    for value, status in [("5", "MB value 5 out of range [10,100]"),
                          ("110", "MB value 110 out of range [10,100]"),
                          ("1O", "Non-decimal digit in MB value 1O")]:
        rejected(rc, rc.write_schemata, "p0", f"MB:1={value}\n")
        assert rc.last_cmd_status == status
    assert rc.mb("p0", 1) == 100


def test_per_host_requested_to_applied_mba_mapping():
    rc = Resctrl(RdtInfo.from_host(SILVER), mba_applied={10: 18.0, 20: 30.0})
    rc.mkdir("p0")
    rc.write_schemata("p0", "MB:0=11\n")     # rounds up to 20, the table says 30% applied
    assert rc.mba_fraction("p0", 0) == pytest.approx(0.30)
    assert rc.mba_fraction("p0", 1) == pytest.approx(1.0)


def test_exclusive_mode_and_overlaps(rc):
    rc.mkdir("p0")
    rc.write_schemata("p0", "L3:0=3f;1=3f\n")
    rejected(rc, rc.write_mode, "p0", "exclusive")
    assert rc.last_cmd_status == "Schemata overlaps"          # the root still owns fff
    rc.write_schemata("", "L3:0=fc0;1=fc0\n")
    rc.write_mode("p0", "exclusive")
    assert rc.mode("p0") == "exclusive"
    rc.mkdir("p1")                                            # shareable + unused bits
    assert rc.cbm("p1", 0) == 0xfc0
    rejected(rc, rc.write_schemata, "p1", "L3:0=1\n")
    assert rc.last_cmd_status == "Overlaps with exclusive group"
    rejected(rc, rc.write_schemata, "p0", "L3:0=fff\n")
    assert rc.last_cmd_status == "Overlaps with other group"
    rc.write_schemata("p1", "L3:0=c0;1=c0\n")                # sharing with the root is fine
    rejected(rc, rc.write_mode, "p1", "pseudo-locksetup")
    assert rc.last_cmd_status == "Unknown or unsupported mode"


def test_no_space_for_a_new_group(rc):
    rc.write_schemata("", "L3:0=fc0;1=fc0\n")
    rc.mkdir("p0")
    rc.write_schemata("p0", "L3:0=3f;1=3f\n")
    rc.write_mode("p0", "exclusive")
    rc.write_mode("", "exclusive")
    e = rejected(rc, rc.mkdir, "p1")
    assert e.errno == errno.ENOSPC and rc.last_cmd_status == "No space on L3:0"
    assert "p1" not in rc.groups


@pytest.mark.parametrize("text,status", [
    ("L3 0=3\n", "Missing ':'"),
    ("L3:\n", "Missing 'L3' value"),
    ("L2:0=3\n", "Unknown or unsupported resource name 'L2'"),
    ("L3:0=3;0=3\n", "Duplicate domain 0"),
    ("L3:x=3\n", "Missing '=' or non-numeric domain"),
])
def test_schemata_syntax_errors(rc, text, status):
    rc.mkdir("p0")
    rejected(rc, rc.write_schemata, "p0", text)
    assert rc.last_cmd_status == status


def test_schemata_writes_are_all_or_nothing(rc):
    rc.mkdir("p0")
    rejected(rc, rc.write_schemata, "p0", "L3:0=3\nMB:0=5\n")
    assert rc.cbm("p0", 0) == 0xfff and rc.mb("p0", 0) == 100


def test_tasks_rmdir_and_root(rc):
    rc.mkdir("p0")
    rc.add_task("p0", 42)
    assert rc.group_of(42) == "p0"
    rc.rmdir("p0")
    assert rc.group_of(42) == "" and 42 in rc.tasks("system/default")
    with pytest.raises(ResctrlError) as e:
        rc.rmdir("system/default")
    assert e.value.errno == errno.EPERM


def test_host_without_rdt():
    rc = Resctrl.from_host(HOSTS["e5-2430l"])
    with pytest.raises(ResctrlError) as e:
        rc.mkdir("p0")
    assert e.value.errno == errno.ENODEV
    assert rc.schemata("") == ""


def test_monitoring_counters(rc):
    rc.mkdir("p0")
    rc.record("p0", 1, occupancy_bytes=6 * MIB, total_bytes=1000)
    rc.record("p0", 1, occupancy_bytes=5 * MIB, total_bytes=500, local_bytes=400)
    mon = rc.mon_data("p0")["mon_L3_01"]
    assert mon == {"llc_occupancy": 5 * MIB, "mbm_total_bytes": 1500, "mbm_local_bytes": 1400}


# ---- slice hash -----------------------------------------------------------------------------

def test_xor_hash_hand_cases():
    h2 = make_slice_hash("xor", 2)
    pa = np.array([0, 1 << 6, 1 << 7, (1 << 6) | (1 << 10)], dtype=np.uint64)
    assert h2(pa).tolist() == [0, 1, 0, 0]            # parity(PA & 0x1B5F575440)
    h16 = make_slice_hash("xor", 16)
    # bit 17 is in masks 0, 1 and 3 -> 0b1011; bit 9 only in mask 3; bit 8 only in mask 2
    pa = np.array([1 << 17, 1 << 9, 1 << 8, (1 << 17) | (1 << 9)], dtype=np.uint64)
    assert h16(pa).tolist() == [0b1011, 0b1000, 0b0100, 0b0011]


def test_xor_hash_is_linear_and_balanced_on_an_aligned_2m_page():
    rng = np.random.default_rng(3)
    h = make_slice_hash("xor", 16)
    a = rng.integers(0, 1 << 38, 1000, dtype=np.uint64)
    b = rng.integers(0, 1 << 38, 1000, dtype=np.uint64)
    assert np.array_equal(h(a ^ b), h(a) ^ h(b))
    g = LLCGeometry.from_host(SILVER, hash_kind="xor")
    base = np.uint64(rng.integers(0, 1 << 17) << 21)                 # a random 2 MiB frame
    lines = base + np.arange(0, 2 * MIB, 64, dtype=np.uint64)
    assert np.all(np.bincount(g.bucket(lines), minlength=g.buckets) == 1)


def test_uniform_hash_is_uniform_and_seeded():
    lines = np.arange(0, 600_000 * 64, 64, dtype=np.uint64)
    h = make_slice_hash("uniform", 6, seed=1)
    counts = np.bincount(h(lines), minlength=6)
    assert np.all(np.abs(counts / counts.sum() - 1 / 6) < 0.005)
    assert np.array_equal(h(lines[:100]), make_slice_hash("uniform", 6, seed=1)(lines[:100]))
    assert not np.array_equal(h(lines[:100]), make_slice_hash("uniform", 6, seed=2)(lines[:100]))
    assert make_slice_hash("auto", 6).kind == "uniform" and make_slice_hash("auto", 16).kind == "xor"


def test_set_index_is_pa_bits_6_to_16():
    g = LLCGeometry.from_host(SILVER)
    pa = np.array([0x40, 0x1FFC0, 0x20000, 0x20040], dtype=np.uint64)
    assert g.set_index(pa).tolist() == [1, 2047, 0, 1]


# ---- pages ----------------------------------------------------------------------------------

def test_page_size_names():
    assert [parse_page_size(p) for p in ("4k", "none", "THP", "hugetlb-2m", "2MB", "1g",
                                          "hugetlb-1g", 4096)] == \
        [4096, 4096, 2 * MIB, 2 * MIB, 2 * MIB, 1 << 30, 1 << 30, 4096]
    with pytest.raises(ValueError):
        parse_page_size("64k")


def test_frame_layouts():
    small = frame_layout(Buffer(6 * MIB, 4096), rng=1)
    assert len(small) == 1536 and len(np.unique(small)) == 1536 and np.all(small % 4096 == 0)
    assert not np.all(np.diff(small.astype(np.int64)) == 4096)        # scattered
    huge = frame_layout(Buffer(6 * MIB, 1 << 30), rng=1)
    assert len(huge) == 1 and huge[0] % (1 << 30) == 0
    addrs = line_addresses(Buffer(6 * MIB, 1 << 30), huge)
    assert np.all(np.diff(addrs.astype(np.int64)) == 64)              # contiguous
    stride = Buffer(6 * MIB, 2 * MIB, pattern="stride", stride_bytes=4096)
    assert len(line_addresses(stride, frame_layout(stride, rng=1))) == 1536


def test_same_seed_same_layout():
    g = LLCGeometry.from_host(SILVER)
    b = Buffer(6 * MIB, 4096)
    assert np.array_equal(bucket_demand(g, b, rng=7), bucket_demand(g, b, rng=7))
    assert not np.array_equal(bucket_demand(g, b, rng=7), bucket_demand(g, b, rng=8))


# ---- miss model -----------------------------------------------------------------------------

def test_miss_model_hand_cases():
    d = np.array([2, 3, 5, 0])
    assert miss_ratio(d, 3, "random") == pytest.approx(2 / 10)
    assert miss_ratio(d, 3, "sequential") == pytest.approx(5 / 10)
    assert miss_ratio(d, 5, "random") == 0.0
    assert occupancy_lines(d, 3) == 8
    p = miss_profile(d, 3)
    assert p.compulsory_lines == 10 and p.occupancy_bytes() == 8 * 64


def test_1g_pages_fit_their_partition():
    g = LLCGeometry.from_host(SILVER)
    d = bucket_demand(g, Buffer(6 * MIB, 1 << 30), rng=1)
    for ways in (11, 6, 4, 3):                     # 3 ways = 6 MiB = the buffer
        assert miss_ratio(d, ways) < 1e-3
        assert occupancy_lines(d, ways) * 64 == 6 * MIB


def test_4k_pages_conflict_misses_grow_as_ways_shrink():
    g = LLCGeometry.from_host(SILVER)
    b4k, b1g = Buffer(6 * MIB, 4096), Buffer(6 * MIB, 1 << 30)
    ways = (11, 6, 4, 3)
    m4k = [np.mean([miss_ratio(bucket_demand(g, b4k, rng=s), w) for s in range(3)]) for w in ways]
    m1g = [miss_ratio(bucket_demand(g, b1g, rng=1), w) for w in ways]
    assert m4k[0] < 1e-3 and all(a < b for a, b in zip(m4k, m4k[1:]))
    assert m4k[-1] > 0.1                           # a fifth of the references miss at 3 ways...
    assert m4k[-1] > 100 * max(m1g[-1], 1e-4)      # ...orders of magnitude above 1 GiB pages
    occ = occupancy_lines(bucket_demand(g, b4k, rng=0), 3) * 64
    assert occ < 5 * MIB                           # small pages cannot fill the partition


def test_sequential_sweep_thrashes_only_overfull_buckets():
    g = LLCGeometry.from_host(SILVER)
    d = bucket_demand(g, Buffer(6 * MIB, 4096, pattern="sequential"), rng=2)
    assert miss_ratio(d, 3, "sequential") > miss_ratio(d, 3, "random")
    assert miss_ratio(bucket_demand(g, Buffer(6 * MIB, 1 << 30, "sequential"), rng=2), 3,
                      "sequential") == 0.0


def test_random_misses_match_binomial_occupancy_theory_4k():
    """Uniform hash, scattered 4 KiB frames: page p covers the 64 set indices of its
    colour (PA bits 12-16), one line each, in a uniformly random slice.  So
    D(slice, set) ~ Binomial(n_c, 1/S) with n_c ~ Binomial(P, 1/32) pages of colour c,
    and the miss ratio is E[max(0, D - w)] / E[D]."""
    g = LLCGeometry.from_host(SILVER, hash_kind="uniform", hash_seed=5)
    b = Buffer(6 * MIB, 4096)
    pages, colours = b.n_pages, g.sets // 64
    from scipy.stats import binom
    n = np.arange(0, pages + 1)
    weights = binom.pmf(n, pages, 1 / colours)
    keep = weights > 1e-12
    for ways in (6, 4, 3):
        model = np.mean([miss_ratio(bucket_demand(g, b, rng=s), ways) for s in range(4)])
        theory = binomial_random_miss_ratio(n[keep], weights[keep], 1 / g.slices, ways)
        assert model == pytest.approx(theory, rel=0.06), ways
        # and the Poisson approximation is in the same place
        lam = b.size_bytes / 64 / g.buckets
        assert poisson_random_miss_ratio(lam, ways) == pytest.approx(theory, rel=0.2)


def test_random_misses_match_binomial_theory_2m_uniform_hash():
    """With 2 MiB pages every set index gets exactly N / sets lines; a uniform hash
    spreads them over the slices: D ~ Binomial(N / sets, 1/S) exactly."""
    g = LLCGeometry.from_host(SILVER, hash_kind="uniform", hash_seed=9)
    b = Buffer(6 * MIB, 2 * MIB)
    per_set = b.size_bytes // 64 // g.sets
    for ways in (6, 4, 3):
        model = np.mean([miss_ratio(bucket_demand(g, b, rng=s), ways) for s in range(3)])
        theory = binomial_random_miss_ratio(np.array([per_set]), np.array([1.0]), 1 / g.slices, ways)
        assert model == pytest.approx(theory, rel=0.05), ways


# ---- sharing and bandwidth ------------------------------------------------------------------

def test_segments():
    assert segments([0x00f, 0x03c], 12) == [((0,), 2), ((1,), 2), ((0, 1), 2)]


def test_shared_ways_split_in_proportion_to_fill_rates():
    g = LLCGeometry.from_host(SILVER)
    big = np.full(g.buckets, 40)                  # never fits: misses at any allocation
    a = Tenant("a", 0x3c0, big, access_rate=3e8)
    b = Tenant("b", 0x3c0, big, access_rate=1e8)
    ra, rb = solve_socket(g, [a, b], bandwidth=1e15)
    assert ra.ways + rb.ways == pytest.approx(4.0)
    assert ra.ways / rb.ways == pytest.approx(ra.fill_rate / rb.fill_rate, rel=1e-3)
    assert ra.ways > rb.ways
    same_a, same_b = solve_socket(g, [Tenant("a", 0x3c0, big, 1e8), Tenant("b", 0x3c0, big, 1e8)],
                                  bandwidth=1e15)
    assert same_a.ways == pytest.approx(2.0) and same_b.ways == pytest.approx(2.0)


def test_exclusive_ways_plus_a_shared_slice():
    g = LLCGeometry.from_host(SILVER)
    big = np.full(g.buckets, 40)
    ra, rb = solve_socket(g, [Tenant("a", 0x00f, big, 1e8), Tenant("b", 0x03c, big, 1e8)], 1e15)
    assert ra.ways == pytest.approx(3.0) and rb.ways == pytest.approx(3.0)   # 2 own + half of 2


def test_a_tenant_that_fits_leaves_the_rest_to_the_other():
    g = LLCGeometry.from_host(SILVER)
    small = np.ones(g.buckets, dtype=np.int64)   # one line per bucket: needs one way
    big = np.full(g.buckets, 40)
    rs, rb = solve_socket(g, [Tenant("s", 0xfff, small, 1e9), Tenant("b", 0xfff, big, 1e8)], 1e15)
    assert rs.ways <= 1.0 + 1e-9 and rb.ways == pytest.approx(12.0 - rs.ways)
    assert rs.ways + rb.ways == pytest.approx(12.0)


def test_bandwidth_cap_arithmetic():
    assert share_bandwidth([60, 60], [100, 100], 100).tolist() == pytest.approx([50, 50])
    assert share_bandwidth([80, 20], [10, 100], 100).tolist() == pytest.approx([10, 20])
    # theta = 0.8: a = min(100, 80) = 80, b = min(20, 40) = 20
    assert share_bandwidth([100, 50], [100, 20], 100).tolist() == pytest.approx([80, 20])
    assert share_bandwidth([300, 100], [1e9, 1e9], 100).tolist() == pytest.approx([75, 25])


def test_mba_throttles_a_streaming_tenant():
    g = LLCGeometry.from_host(SILVER)
    rc = Resctrl.from_host(SILVER)
    rc.mkdir("batch")
    rc.write_schemata("batch", "MB:0=15\n")                # -> 20 %
    bw = float(SILVER["mem_bw_gbps"]) * 1e9
    big = np.full(g.buckets, 40)
    demand_bps = 2e9 * 64                                   # 128 GB/s if it all missed
    (r,) = solve_socket(g, [Tenant("batch", rc.cbm("batch", 0), big, 2e9,
                                   mba_fraction=rc.mba_fraction("batch", 0))], bw)
    assert r.bw_granted == pytest.approx(0.2 * bw)
    assert r.throttle == pytest.approx(0.2 * bw / r.bw_demand)
    assert r.bw_demand == pytest.approx(demand_bps * r.miss_ratio)
    rc.record("batch", 0, occupancy_bytes=r.occupancy_bytes, total_bytes=r.bw_granted * 1.0)
    assert rc.mon_data("batch")["mon_L3_00"]["mbm_total_bytes"] == int(0.2 * bw)


@pytest.mark.parametrize("overrides,expected", [
    (["host=silver-4314-2s", "host.llc_slices=5"],
     "host.llc_slices = 5 is invalid: llc_mb x 2^20 must be a whole number of sets"),
    (["host=silver-4314-2s", "host.mba_bandwidth_gran=200"],
     "host.mba_bandwidth_gran = 200 is invalid: must be in [0, 100]"),
    (["host=silver-4314-2s", "host.rdt_min_cbm_bits=13"],
     "host.rdt_min_cbm_bits = 13 is invalid: must be in [0, 12]"),
])
def test_memory_host_keys_are_checked(overrides, expected):
    from scenarios.config import compose
    from scenarios.validate import ConfigError
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    assert expected in str(info.value)
