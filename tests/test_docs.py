"""The docs name only files, config options, keys, modules and sections that
exist.

README.md and docs/*.md are scanned for:

- repository paths (``sim/...``, ``docs/...``, ``scenarios/conf/...``, ...),
  in backticks, links or prose, and relative links between the docs: the
  file or directory must exist (a ``<placeholder>`` ends the checked part);
- ``group=option`` (Hydra overrides in backticks and code blocks): the
  option must be a file ``scenarios/conf/<group>/<option>.yaml``;
- ``group.key`` config keys (backticks and code blocks): the key must be
  one that some option of the group has, in its YAML or its schema;
- dotted Python names (``sim.engine.Engine``, ``results.readers.open_results``)
  in backticks and code blocks: the module must exist and the first name
  after it must be defined at its top level;
- ``#anchor`` links, within a doc or to another: some heading of the target
  must have that anchor (GitHub's slugs); a section named in prose
  (``docs/memory.md, "Host levers"``) must be a heading or bold title there;
- README's config-group table must list every option of every group, and
  only existing ones.

The code's own pointers into the docs (``docs/<page>.md`` in comments,
docstrings and option files) must name pages that exist.

``check(text, doc)`` returns the problems of one document;
``test_checker_reports_stale_names`` shows it finds each kind.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import typing
from functools import cache
from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore

from scenarios import schema
from scenarios.config import CONF_DIR, list_options

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# top-level directories whose paths the docs name
PATH_ROOTS = ("sim", "policies", "backends", "scenarios", "calibration", "results",
              "benchmarks", "docs", "tests")
# Python packages whose dotted names the docs name
PACKAGES = ("sim", "policies", "backends", "scenarios", "calibration", "results", "benchmarks")
# a dotted token ending like this is a file name, not a module
FILE_SUFFIXES = (".md", ".py", ".pxd", ".yaml", ".yml", ".parquet", ".csv", ".json",
                 ".c", ".go", ".txt", ".html", ".so")
# directories a tool creates when first run (not in the repository):
# calibration.mba_table writes its tables to sim/memory/mba/
GENERATED = ("sim/memory/mba/",
             # build products of make (the native workers and microbenchmarks)
             "backends/workers/build/", "calibration/bench/native/build/")
# what starts a placeholder (`<name>`, `{a,b}`, `*`, `...`, or a command
# line's upper-case `NAME`) in a path or option: the check stops there
PLACEHOLDER = re.compile(r"[<{*]|\.\.\.|\b[A-Z]{3,}\b")

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./<>{}*-]*)" % "|".join(PATH_ROOTS))
# (not a Python keyword argument: ``trace=replayed_trace(cfg)``)
OVERRIDE = re.compile(r"(?<![\w./+-])\+?([a-z_]+)=([^\s`'\"()\]]+)(?![\w(])")
KEY = re.compile(r"(?<![\w./-])([a-z_]+)\.([a-z_][a-z0-9_]*)(?![\w(])")
# a section named in prose: docs/real-backend.md, "noisy_jobs"
SECTION_REF = re.compile(r"([\w./-]+\.md)[`)\]]*,\s*\"([^\"]+)\"")
BOLD = re.compile(r"\*\*([^*]+)\*\*")
DOTTED = re.compile(r"(?<![\w./-])((?:%s)(?:\.\w+)+)" % "|".join(PACKAGES))


def groups() -> dict[str, set[str]]:
    """Config group -> its options (the YAML files in scenarios/conf/<group>/)."""
    return {g: set(opts) for g, opts in list_options().items()}


@cache
def group_keys() -> dict[str, frozenset[str]]:
    """Config group -> every key some option of it has: the keys in the
    options' YAML files and in the group's schemas (its per-option
    ``base_*`` schemas in Hydra's ConfigStore, or its dataclass in the root
    schema ``scenarios.schema.Config``)."""
    schema.register()
    store = ConfigStore.instance()
    root = typing.get_type_hints(schema.Config)
    out = {}
    for group in groups():
        keys: set[str] = set()
        for t in (root.get(group), *typing.get_args(root.get(group))):
            if dataclasses.is_dataclass(t):
                keys |= {f.name for f in dataclasses.fields(t)}
        if group in store.list(""):
            for name in store.list(group):
                keys |= set(store.load(f"{group}/{name}").node.keys())
        for option in (CONF_DIR / group).glob("*.yaml"):
            data = yaml.safe_load(option.read_text()) or {}
            keys |= {k for k in data if k != "defaults"}
        out[group] = frozenset(keys)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped
    (except - and _), spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Anchors of a document's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@cache
def top_level_names(module: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def module_file(parts: list[str], root: Path) -> Path | None:
    """The file of module ``parts`` (a package's __init__.py), or None."""
    base = root.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def dotted_problem(name: str, root: Path) -> str | None:
    """Why ``name`` (package.module[.attr...]) does not exist, or None.
    Checks the longest module prefix and the first name after it (any name
    passes in a module with a lazy ``__getattr__``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        f = module_file(parts[:n], root)
        if f is None:
            if n == 1:
                return f"module {parts[0]} does not exist"
            continue
        if n == len(parts):
            return None
        names = top_level_names(f)
        if parts[n] in names or "__getattr__" in names or module_file(parts[:n + 1], root):
            return None
        return f"{'.'.join(parts[:n])} has no {parts[n]}"
    return None


def code_texts(text: str) -> list[str]:
    """The document's code: fenced blocks and inline code spans."""
    fences = FENCE.findall(text)
    return fences + CODE_SPAN.findall(FENCE.sub("", text))


def path_problem(path: str, root: Path) -> str | None:
    """Why ``path`` does not exist, or None; a path with a placeholder is
    checked up to the directory that holds the placeholder."""
    path = path.rstrip(".,;:")
    if (root / path).exists():
        return None
    m = PLACEHOLDER.search(path)
    checked = path[:m.start()] if m else path
    if m and not checked.endswith("/"):
        checked = checked.rsplit("/", 1)[0]
    if not (root / checked).exists() and not checked.startswith(GENERATED):
        return f"path {path} does not exist"
    return None


def check(text: str, doc: Path, root: Path = ROOT) -> list[str]:
    """Every stale name in one document (``doc`` gives relative links'
    base directory)."""
    problems: list[str] = []
    options = groups()
    keys = group_keys()
    prose = FENCE.sub("", text)

    # links: relative files and anchors
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):           # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        target_file = (doc.parent / file_part).resolve() if file_part else doc
        if file_part and not target_file.exists():
            problems.append(f"link {target}: {file_part} does not exist")
            continue
        if anchor and target_file.suffix == ".md":
            if anchor not in anchors(target_file.read_text() if file_part else text):
                problems.append(f"link {target}: no heading with anchor #{anchor}")

    # sections named in prose: a heading or bold paragraph title of the target
    for file_part, section in SECTION_REF.findall(prose):
        section = " ".join(section.split())
        base = root if file_part.startswith(("docs/", "README")) else doc.parent
        target_file = base / file_part
        if not target_file.exists():
            continue                                # reported as a path or link
        target = target_file.read_text()
        titles = [h for h in re.findall(r"^#{1,6}\s+(.*)", FENCE.sub("", target), re.M)]
        titles += BOLD.findall(target)
        if not any(section.lower() in t.lower() for t in titles):
            problems.append(f'{file_part}, "{section}": no such heading or bold title')

    # repository paths anywhere in the text
    for path in sorted(set(PATH.findall(text))):
        if (p := path_problem(path, root)):
            problems.append(p)

    code = "\n".join(code_texts(text))
    # group=option
    for group, values in OVERRIDE.findall(code):
        if group not in options:
            continue
        for value in re.split(r"[,|]", values):
            if value and not PLACEHOLDER.search(value) and value not in options[group]:
                problems.append(f"{group}={value}: no option {value} in scenarios/conf/{group}/")
    # dotted Python names, then group.key among what remains
    modules = set()
    for name in DOTTED.findall(code):
        if name.endswith(FILE_SUFFIXES):
            continue
        modules.add(name.split(".")[0] + "." + name.split(".")[1])
        if (p := dotted_problem(name, root)) and not (
                name.split(".")[0] in keys and name.split(".")[1] in keys[name.split(".")[0]]):
            problems.append(f"{name}: {p}")
    for group, key in KEY.findall(code):
        if group not in keys or f"{group}.{key}" in modules or f".{key}" in FILE_SUFFIXES:
            continue
        if key not in keys[group]:
            problems.append(f"{group}.{key}: no option of {group} has a key {key}")
    return problems


def readme_table_problems(text: str) -> list[str]:
    """README's config-group table against scenarios/conf: every option
    listed, none that does not exist."""
    options = groups()
    listed: dict[str, set[str]] = {}
    section = text.split("### Config groups", 1)[1].split("\n#", 1)[0]
    group = None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= {"-"} and cells[0]:
            continue
        if cells[0] == "group":
            continue
        if cells[0]:
            group = cells[0].strip("`")
        listed.setdefault(group, set()).update(CODE_SPAN.findall(cells[1]))
    problems = []
    for group, opts in listed.items():
        if group not in options:
            problems.append(f"README lists a config group {group} that does not exist")
            continue
        for o in sorted(opts - options[group]):
            problems.append(f"README lists {group}={o}, which does not exist")
    for group, opts in options.items():
        for o in sorted(opts - listed.get(group, set())):
            problems.append(f"README's config-group table does not list {group}={o}")
    return problems


def test_docs_name_only_what_exists():
    problems = [f"{doc.relative_to(ROOT)}: {p}"
                for doc in DOCS for p in check(doc.read_text(), doc)]
    assert problems == []


def test_code_names_only_docs_that_exist():
    """Comments, docstrings and option files point at docs/*.md pages that
    exist (a renamed or removed page leaves no dangling pointer)."""
    missing = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*")):
            if f.suffix not in (".py", ".pxd", ".yaml") or not f.is_file():
                continue
            for page in set(re.findall(r"\bdocs/[\w-]+\.md", f.read_text())):
                if not (ROOT / page).exists():
                    missing.append(f"{f.relative_to(ROOT)}: {page}")
    assert missing == []


def test_readme_lists_every_config_option():
    assert readme_table_problems((ROOT / "README.md").read_text()) == []


def test_checker_reports_stale_names(tmp_path):
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section\n")
    for d in ("sim", "scenarios/conf/workload"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "sim" / "__init__.py").write_text("")
    (tmp_path / "sim" / "engine.py").write_text("class Engine:\n    pass\n")
    doc.write_text(
        "# Page\n\n## Kept section\n\n"
        "Fresh: `sim/engine.py`, `sim.engine.Engine`, [other](other.md#a-section),\n"
        "[here](#kept-section), `scenarios/conf/<group>/`, `workload=poisson`,\n"
        "`scheduler.sched_latency_ns`, `host.smt_throughput`, (other.md, \"A\nsection\").\n\n"
        "Stale: `sim/api_old.py`, see docs/gone.md, [x](missing.md),\n"
        "[y](other.md#no-such-section), [z](#nowhere), `sim.engine.OldEngine`,\n"
        "`sim.gone.thing`, `scheduler.no_such_tunable`, (other.md, \"Gone\").\n\n"
        "```\ncolosim run workload=no_such_workload scheduler=cfs,nope\n```\n")
    problems = check(doc.read_text(), doc, root=tmp_path)
    expected = ["path sim/api_old.py does not exist",
                "path docs/gone.md does not exist",
                "link missing.md: missing.md does not exist",
                "link other.md#no-such-section: no heading with anchor #no-such-section",
                "link #nowhere: no heading with anchor #nowhere",
                "sim.engine.OldEngine: sim.engine has no OldEngine",
                "sim.gone.thing: sim has no gone",
                "scheduler.no_such_tunable: no option of scheduler has a key no_such_tunable",
                "workload=no_such_workload: no option no_such_workload",
                "scheduler=nope: no option nope",
                'other.md, "Gone": no such heading or bold title']
    for e in expected:
        assert any(p.startswith(e) for p in problems), (e, problems)
    assert len(problems) == len(expected), problems


def test_readme_table_check_reports_missing_and_unknown_options():
    table = ("### Config groups\n\n| group | option | what |\n|---|---|---|\n"
             "| `scheduler` | `cfs`, `bfs` | x |\n| | `eevdf` | y |\n\n## Next\n")
    problems = readme_table_problems(table)
    assert "README lists scheduler=bfs, which does not exist" in problems
    assert "README's config-group table does not list scheduler=lags" in problems
    assert "README's config-group table does not list workload=poisson" in problems
    assert "README's config-group table does not list scheduler=cfs" not in problems
    assert "README's config-group table does not list scheduler=eevdf" not in problems


def test_slug_matches_github():
    assert slug("The real-time class (`sim/rt.py`)") == "the-real-time-class-simrtpy"
    assert slug("Fig. 3: CFS goodput, overhead") == "fig-3-cfs-goodput-overhead"
    assert anchors("# A\n## B\n## B\n") == {"a", "b", "b-1"}
