"""`colosim report`: the HTML holds every plot the data allows, each a real
non-blank image, says why the others are missing, and renders in headless
Chromium."""
import base64
import contextlib
import html.parser
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from matplotlib import image as mpimg

from cli.main import main
from results.compare import compare
from results.readers import open_results
from results.reading import reading
from results.report import TIMELINE_S
from results.sched import throttled_periods
from results.schema import SCHED_FILE, SCHED_METRICS_FILE
from scenarios.sweep import collect
from tests.sweeps import make_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOTS = ("compared-metrics-per-policy", "latency-tails-per-policy--ccdf",
         "latency-over-time-per-policy")
ENTITLEMENT = "cpu-entitlement-over-time--autoscalers"
TIMELINE = "per-cpu-timeline"
METRICS = "task-scheduling-metrics-per-cgroup"
NS = 1_000_000_000


class _Sections(html.parser.HTMLParser):
    """section id -> its <img> sources, its text, its image maps' <area>
    attributes by map name and its figure captions."""

    def __init__(self):
        super().__init__()
        self.sections, self.current, self.map, self.in_caption = {}, None, None, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.current = self.sections.setdefault(
                attrs["id"], {"imgs": [], "text": "", "maps": {}, "captions": []})
        elif self.current is None:
            return
        elif tag == "img":
            self.current["imgs"].append(attrs["src"])
        elif tag == "map":
            self.map = self.current["maps"].setdefault(attrs["name"], [])
        elif tag == "area":
            self.map.append(attrs)
        elif tag == "figcaption":
            self.in_caption = True
            self.current["captions"].append("")

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self.in_caption = False

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data
            if self.in_caption:
                self.current["captions"][-1] += data


def sections(path):
    parser = _Sections()
    parser.feed(path.read_text())
    return parser.sections


def decoded_png(src):
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    return mpimg.imread(io.BytesIO(base64.b64decode(src[len(prefix):])), format="png")


def assert_not_blank(pixels):
    rgb = pixels[..., :3]
    # a plot has axes, text and lines: many pixels far from the background
    assert rgb.std() > 0.05
    assert (np.abs(rgb - rgb[0, 0]).sum(axis=-1) > 0.3).mean() > 0.01


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return make_sweep(tmp_path_factory.mktemp("report") / "sweep")


@pytest.fixture(scope="module")
def rendered(sweep):
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(sweep)]) == 0
    return sweep / "report.html", stdout.getvalue()


@pytest.fixture(scope="module")
def report(rendered):
    return rendered[0]


def test_report_is_written_in_the_directory_and_its_path_printed(sweep, rendered):
    path, stdout = rendered
    assert stdout.strip() == f"report: {sweep / 'report.html'}"
    assert path.read_text().startswith("<!DOCTYPE html>")


def test_every_plot_is_an_embedded_non_blank_png(report):
    found = sections(report)
    for slug in PLOTS:
        assert len(found[slug]["imgs"]) == 1, slug
        assert_not_blank(decoded_png(found[slug]["imgs"][0]))
    # self-contained: nothing is loaded from elsewhere
    assert not re.search(r'(src|href)="(?!data:)', report.read_text())


def test_no_entitlement_plot_without_cpu_limits(report):
    section = sections(report)[ENTITLEMENT]
    assert section["imgs"] == []
    assert "No controller limited CPU in these runs" in section["text"]


def test_comparison_tables_are_in_the_report(report):
    text = sections(report)["comparison-tables"]["text"]
    for metric in ("goodput_rps", "latency_p99_s", "sched_overhead_frac", "cpu_util"):
        assert f"{metric}" in text
    assert "delta vs cfs" in text


def test_entitlement_is_plotted_from_cpu_limits_in_intervals(sweep, tmp_path, capsys):
    # Bandwidth control is another issue: give each run's function cgroups a
    # quota in intervals.parquet (the schema's optional quota_us/period_us)
    # to check that the report plots what the tables say.
    limited = tmp_path / "limited"
    shutil.copytree(sweep, limited)
    for path in limited.glob("runs/*/intervals.parquet"):
        table = pq.read_table(path)
        leaf = [c.startswith("/faas.slice/") for c in table.column("cgroup").to_pylist()]
        columns = {"quota_us": pa.array([50_000 if x else None for x in leaf], pa.int64()),
                   "period_us": pa.array([100_000] * len(leaf), pa.int64())}
        for name, values in columns.items():   # the simulator may write them (all null)
            at = table.schema.get_field_index(name)
            table = (table.set_column(at, name, values) if at >= 0
                     else table.append_column(name, values))
        pq.write_table(table, path)
    out = tmp_path / "elsewhere" / "limited.html"
    assert main(["report", str(limited), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out}"
    section = sections(out)[ENTITLEMENT]
    assert len(section["imgs"]) == 1
    assert_not_blank(decoded_png(section["imgs"][0]))
    assert "No controller limited CPU" not in section["text"]


def test_the_reading_opens_the_report(report, sweep):
    text = sections(report)["reading"]["text"]
    assert text == "Reading" + reading(compare(open_results(sweep))).replace("\n\n", "")
    assert "workload.functions=" in text


def test_metrics_are_drawn_against_density_with_ci_bands(report):
    section = sections(report)["compared-metrics-per-policy"]
    assert "each compared metric against workload.functions" in section["captions"][0]
    assert "95% bootstrap CI" in section["captions"][0]
    tails = sections(report)["latency-tails-per-policy--ccdf"]["captions"][0]
    assert "Complementary CDF" in tails and "1% line at its p99" in tails
    over_time = sections(report)["latency-over-time-per-policy"]["captions"][0]
    assert "p99 latency of the requests completed in each of" in over_time


def test_a_single_run_report_draws_its_metrics_per_policy(sweep):
    run = next((sweep / "runs").iterdir())
    assert main(["report", str(run)]) == 0
    found = sections(run / "report.html")
    for slug in PLOTS:
        assert len(found[slug]["imgs"]) == 1, slug
        assert_not_blank(decoded_png(found[slug]["imgs"][0]))
    metrics = found["compared-metrics-per-policy"]
    assert "No numeric parameter varies across these runs" in metrics["text"]
    assert "whiskers its 95% bootstrap CI" in metrics["captions"][0]


def test_policies_without_a_density_are_bars_with_ci_whiskers(sweep, tmp_path):
    # one density, both policies and seeds: no numeric key varies
    one = tmp_path / "one"
    shutil.copytree(sweep, one)
    for run in (one / "runs").iterdir():
        if yaml.safe_load((run / "config.yaml").read_text())["workload"]["functions"] == 4:
            shutil.rmtree(run)
    collect(one, ["scheduler", "seed", "workload.functions"])
    section = sections(report_of(one))["compared-metrics-per-policy"]
    assert len(section["imgs"]) == 1
    assert "whiskers its 95% bootstrap CI" in section["captions"][0]


def test_report_of_a_non_results_directory_fails_clearly(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "is neither a run directory" in capsys.readouterr().err


def chromium_flags(tmp_path, width=1300):
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={width},2400"]


def chromium_probe(report, tmp_path, expression, width=1300):
    """The JSON value of a JavaScript ``expression`` evaluated in headless
    Chromium (a window ``width`` pixels wide) once ``report`` has loaded (in
    a copy of the page)."""
    page = tmp_path / "probe.html"
    probe = ("<script>window.addEventListener('load', () => { const p = "
             "document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify("
             f"{expression}); document.body.appendChild(p); }});</script></body>")
    page.write_text(report.read_text().replace("</body>", probe))
    dom = subprocess.run([*chromium_flags(tmp_path, width), "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    return json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom).group(1))


# each image's decoded size: a corrupt PNG loads with naturalWidth 0
IMAGE_SIZES = "[...document.images].map(i => [i.naturalWidth, i.naturalHeight])"


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium); "
    ".ci/run installs it")


@needs_chromium
def test_report_renders_in_headless_chromium(report, tmp_path):
    # the rendered page's sections, each with its text or images laid out
    shown = chromium_probe(report, tmp_path, "[...document.querySelectorAll('section')]"
                           ".map(s => [s.id, s.getBoundingClientRect().height])")
    heights = dict(shown)
    assert [s for s, _ in shown][:2] == ["runs", "reading"]
    assert all(heights[s] > 300 for s in PLOTS) and heights["reading"] > 50
    sizes = chromium_probe(report, tmp_path, IMAGE_SIZES)
    assert len(sizes) == len(PLOTS)
    assert all(w > 200 and h > 150 for w, h in sizes)
    shot = tmp_path / "shot.png"
    subprocess.run([*chromium_flags(tmp_path), f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2400, 1300)
    assert_not_blank(pixels)
    # the plots sit below the run overview: the page's middle is not empty
    assert_not_blank(pixels[600:1800])


# ------------------------------------------------------- the schedule (trace=sched)

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """cfs and lags traced, with a CPU limit so that cfs_rqs are throttled."""
    return make_sweep(tmp_path_factory.mktemp("traced") / "sweep", seeds=(0,), functions=(4,),
                      overrides=["trace=sched", "workload.quota_us=5000"])


def report_of(directory, *options):
    out = directory / "report.html"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(directory), *options]) == 0
    return out


def busiest(sched):
    """The TIMELINE_S window with the most switches, starting at a switch
    (the earliest of equals), by brute force."""
    t = sched.loc[sched["event"] == "sched_switch", "time_ns"].to_numpy()
    length = int(TIMELINE_S * NS)
    counts = [((t >= s) & (t < s + length)).sum() for s in t]
    start = int(t[counts.index(max(counts))])
    return start, start + length


def expected_bars(sched, lo, hi):
    """Per CPU, (cpu, start, end) of each stretch a task ran from its
    sched_switch in to the CPU's next switch (the trace's end for the
    last), that overlaps [lo, hi) for a positive time."""
    assert (np.diff(sched["time_ns"]) >= 0).all()   # written in time order
    end = int(sched["time_ns"].max())
    bars = []
    for cpu in sorted(sched["cpu"].unique()):
        sw = sched[(sched["event"] == "sched_switch") & (sched["cpu"] == cpu)]
        times, pids = sw["time_ns"].tolist(), sw["next_pid"].tolist()
        for t, pid, t_next in zip(times, pids, times[1:] + [end]):
            if pid != 0 and max(t, lo) < min(t_next, hi):
                bars.append((cpu, max(t, lo), min(t_next, hi)))
    return bars


def expected_throttled(sched, lo, hi):
    """Throttled periods of each (CPU, cgroup) overlapping [lo, hi)."""
    first, last = int(sched["time_ns"].min()), int(sched["time_ns"].max())
    periods = []
    ev = sched[sched["event"].isin(("throttle_cfs_rq", "unthrottle_cfs_rq"))]
    for (cpu, cgroup), rows in ev.groupby(["cpu", "next_cgroup"]):
        start, before = None, True
        for t, event in zip(rows["time_ns"], rows["event"]):
            if event == "throttle_cfs_rq":
                start = t if start is None else start
            elif start is not None or before:
                periods.append((start if start is not None else first, t))
                start = None
            before = False
        if start is not None:
            periods.append((start, last))
    return [p for p in periods if max(p[0], lo) < min(p[1], hi)]


def check_timeline(section, run, lo, hi):
    """The run's chart: the host's two CPUs (host=this-vm) as two lanes, one
    bar per running interval and one mark per throttled period in [lo, hi)."""
    sched = pq.read_table(run / SCHED_FILE).to_pandas()
    areas = section["maps"][f"timeline-{run.name}"]
    bars = [a for a in areas if a["data-kind"] == "run"]
    assert len(bars) == len(expected_bars(sched, lo, hi)) > 0
    assert len(areas) - len(bars) == len(expected_throttled(sched, lo, hi)) > 0
    lanes = {}
    for a in bars:
        x0, y0, x1, y1 = map(int, a["coords"].split(","))
        lanes.setdefault(int(a["data-cpu"]), set()).add((y0, y1))
    assert sorted(lanes) == [0, 1]
    (top0, bottom0), = lanes[0]    # one band per CPU, CPU 0 above CPU 1
    (top1, bottom1), = lanes[1]
    assert top0 < bottom0 < top1 < bottom1
    caption = next(c for c in section["captions"] if run.name in c)
    assert f"{lo / NS:.3f} to {hi / NS:.3f} s, 2 CPUs, {len(bars)} running intervals" in caption


def test_timeline_of_traced_runs_in_their_busiest_window(traced):
    found = sections(report_of(traced))[TIMELINE]
    runs = sorted((traced / "runs").iterdir())
    assert len(found["imgs"]) == len(runs) == 2    # one run per policy: cfs, lags
    for src in found["imgs"]:
        assert_not_blank(decoded_png(src))
    for run in runs:
        check_timeline(found, run, *busiest(pq.read_table(run / SCHED_FILE).to_pandas()))
    assert f"the {TIMELINE_S * 1e3:g} ms holding the most sched_switch events" in found["text"]
    assert "have no sched.parquet" not in found["text"]


def test_timeline_window_option(traced, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(traced, copy)
    found = sections(report_of(copy, "--timeline-window", "0.25:0.45"))[TIMELINE]
    for run in sorted((copy / "runs").iterdir()):
        check_timeline(found, run, int(0.25 * NS), int(0.45 * NS))
    assert "0.25 to 0.45 s of run time, as given with --timeline-window" in found["text"]


def test_throttled_periods_pair_each_cfs_rqs_events():
    # a simulated trace starts at t = 0, before any throttle: the cases a
    # real host's trace, started mid-run, also has are written out here
    rows = [(0, "sched_switch", 0, None), (5, "unthrottle_cfs_rq", 0, "/a"),
            (10, "throttle_cfs_rq", 0, "/a"), (12, "throttle_cfs_rq", 1, "/a"),
            (15, "throttle_cfs_rq", 0, "/a"),     # again, while throttled: no new period
            (20, "unthrottle_cfs_rq", 0, "/a"), (25, "unthrottle_cfs_rq", 0, "/a"),
            (30, "throttle_cfs_rq", 0, "/b"), (40, "sched_switch", 1, None)]
    sched = pd.DataFrame(rows, columns=["time_ns", "event", "cpu", "next_cgroup"])
    got = throttled_periods(sched, 0, 100)
    assert list(got.itertuples(index=False, name=None)) == [
        (0, "/a", 0, 5), (0, "/a", 10, 20), (0, "/b", 30, 40), (1, "/a", 12, 40)]
    clipped = throttled_periods(sched, 6, 35)
    assert list(zip(clipped["start_ns"], clipped["end_ns"])) == [(10, 20), (30, 35), (12, 35)]


@pytest.mark.parametrize("value", ["x", "0.3", "0.3:0.1", "0.2:0.2", "-1:2", "nan:1", "1:inf",
                                   "0:1:2", ":1"])
def test_bad_timeline_window_fails_before_reading_anything(tmp_path, capsys, value):
    # the directory does not exist: the option is checked first
    assert main(["report", str(tmp_path / "missing"), f"--timeline-window={value}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"colosim: error: --timeline-window {value!r}: expected START:END")
    assert "0 <= START < END" in err


def test_runs_without_a_trace_are_named_with_how_to_trace_them(report, traced, tmp_path):
    section = sections(report)[TIMELINE]
    assert section["imgs"] == []
    assert "8 of 8 runs have no sched.parquet" in section["text"]
    assert "trace=sched" in section["text"]
    # a mix: the traced run is drawn, the other named
    mixed = tmp_path / "mixed"
    shutil.copytree(traced, mixed)
    untraced, kept = sorted((mixed / "runs").iterdir())
    (untraced / SCHED_FILE).unlink()
    section = sections(report_of(mixed))[TIMELINE]
    assert list(section["maps"]) == [f"timeline-{kept.name}"]
    assert f"1 of 2 runs have no sched.parquet ({untraced.name})" in section["text"]


def write_metrics(run, scale):
    """A sched_metrics.parquet with the columns results/sched.py writes: a
    task row (whose values must not show) and three cgroup rows whose
    wake-up latency p99 grows with the cgroup number, times ``scale``."""
    cgroups = ["/faas.slice/func-10", "/faas.slice/func-2", "/faas.slice/func-1"]
    n = 1 + len(cgroups)

    def f(values):
        return pa.array(values, pa.float64())

    def i(values):
        return pa.array(values, pa.int64())
    p99 = [0.5] + [scale * 1e-4 * int(c.rsplit("-", 1)[1]) for c in cgroups]
    pq.write_table(pa.table({
        "level": ["task"] + ["cgroup"] * len(cgroups),
        "pid": i([42] + [None] * len(cgroups)),
        "comm": ["func-10"] + [None] * len(cgroups),
        "cgroup": [cgroups[0]] + cgroups,
        "runtime_s": f([0.1] * n), "n_runs": i([10] * n), "n_wakeups": i([9] * n),
        "wakeup_latency_mean_s": f([2e-5] * n),
        "wakeup_latency_p50_s": f([0.5] + [scale * 1e-5] * len(cgroups)),
        "wakeup_latency_p95_s": f([5e-5] * n), "wakeup_latency_p99_s": f(p99),
        "wakeup_latency_max_s": f([1e-3] * n), "run_length_mean_s": f([2e-3] * n),
        "run_length_p50_s": f([1.5e-3] * n), "run_length_p99_s": f([9e-3] * n),
        "switches_voluntary": i([8] * n), "switches_involuntary": i([2] * n),
        "involuntary_frac": f([0.2] * n), "migrations": i([0] + [3] * len(cgroups)),
        "migrations_wakeup": i([0] + [1] * len(cgroups)),
    }), run / SCHED_METRICS_FILE)


@pytest.fixture(scope="module")
def with_metrics(traced, tmp_path_factory):
    copy = tmp_path_factory.mktemp("metrics") / "sweep"
    shutil.copytree(traced, copy)
    scales = {}
    for scale, run in enumerate(sorted((copy / "runs").iterdir()), start=1):
        write_metrics(run, scale)
        scales[run.name] = scale
    return report_of(copy), scales


def test_sched_metrics_section_shows_the_cgroup_rows_per_policy(with_metrics):
    report, scales = with_metrics
    section = sections(report)[METRICS]
    page = report.read_text()
    page = page[page.index(f'id="{METRICS}"'):]
    tables = page[:page.index("</section>")].split("<h3>")[1:]
    assert sorted(t.split(",")[0] for t in tables) == ["cfs", "lags"]
    for table in tables:
        scale = scales[re.match(r"\w+, run (\w+) ", table).group(1)]
        rows = re.findall(r"<tr><td>(.*?)</td>(.*?)</tr>", table)
        # cgroup rows only, in natural order; the task row's 500,000 µs is not shown
        assert [r[0] for r in rows] == ["/faas.slice/func-1", "/faas.slice/func-2",
                                        "/faas.slice/func-10"]
        assert "500,000" not in table
        cells = [re.findall(r"<td class=num>(.*?)</td>", r[1]) for r in rows]
        assert cells[2] == [f"{10 * scale:.1f}", f"{1000 * scale:,.1f}", "1,500.0", "20.0%", "3"]
    assert len(section["imgs"]) == 1
    assert_not_blank(decoded_png(section["imgs"][0]))
    assert "Wake-up latency p99 per cgroup under /faas.slice" in section["captions"][0]


def test_no_sched_metrics_section_without_the_file(report):
    assert METRICS not in sections(report)


@needs_chromium
def test_schedule_sections_render_in_headless_chromium(with_metrics, tmp_path):
    report, _ = with_metrics
    sizes = chromium_probe(report, tmp_path, IMAGE_SIZES)
    # compared metrics (bars: one density), latency tails and over time, CPU
    # entitlement (the quota), two timelines, the p99 chart
    assert len(sizes) == 3 + 1 + 2 + 1
    assert all(w > 200 and h > 100 for w, h in sizes)
    # each timeline is shown at its own size, also in a window narrower than
    # the image, so its image map lines up: the point at the middle of a
    # bar's area is that area (its tooltip)
    hits = chromium_probe(report, tmp_path, """
      [...document.querySelectorAll('img[usemap]')].map(img => {
        const map = document.querySelector(`map[name='${img.useMap.slice(1)}']`);
        const area = [...map.areas].find(a => a.dataset.kind === 'run');
        const [x0, y0, x1, y1] = area.coords.split(',').map(Number);
        img.scrollIntoView();
        const box = img.getBoundingClientRect();
        const hit = document.elementFromPoint(box.left + (x0 + x1) / 2, box.top + (y0 + y1) / 2);
        return [img.width === img.naturalWidth, hit === area];
    })""", width=900)
    assert hits == [[True, True], [True, True]]
