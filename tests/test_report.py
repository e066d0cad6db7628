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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib import image as mpimg

from cli.main import main
from tests.sweeps import make_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOTS = ("latency-cdfs-per-policy", "goodput-and-throughput-vs-density",
         "scheduler-overhead-and-cost-per-switch-vs-density")
ENTITLEMENT = "cpu-entitlement-over-time--autoscalers"


class _Sections(html.parser.HTMLParser):
    """section id -> its <img> sources and its text."""

    def __init__(self):
        super().__init__()
        self.sections, self.current = {}, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.current = self.sections.setdefault(attrs["id"], {"imgs": [], "text": ""})
        elif tag == "img" and self.current is not None:
            self.current["imgs"].append(attrs["src"])

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data


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


def test_a_single_run_report_explains_the_missing_density_plots(sweep):
    run = next((sweep / "runs").iterdir())
    assert main(["report", str(run)]) == 0
    found = sections(run / "report.html")
    assert len(found["latency-cdfs-per-policy"]["imgs"]) == 1
    for slug in PLOTS[1:]:
        assert found[slug]["imgs"] == []
        assert "No numeric parameter varies across these runs" in found[slug]["text"]


def test_report_of_a_non_results_directory_fails_clearly(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "is neither a run directory" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None,
                    reason="headless Chromium is not installed (apt-get install chromium); "
                    ".ci/run installs it")
def test_report_renders_in_headless_chromium(report, tmp_path):
    # A copy with a probe script that lists each image's decoded size: a
    # corrupt PNG loads with naturalWidth 0.
    page = tmp_path / "probe.html"
    probe = ("<script>window.addEventListener('load', () => { const p = "
             "document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify("
             "[...document.images].map(i => [i.naturalWidth, i.naturalHeight])); "
             "document.body.appendChild(p); });</script></body>")
    page.write_text(report.read_text().replace("</body>", probe))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    sizes = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom).group(1))
    assert len(sizes) == len(PLOTS)
    assert all(w > 200 and h > 150 for w, h in sizes)
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1300,2400",
                    report.as_uri()], capture_output=True, timeout=120, check=True)
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2400, 1300)
    assert_not_blank(pixels)
    # the plots sit below the run overview: the page's middle is not empty
    assert_not_blank(pixels[600:1800])
