VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install launchers build demo test test-slow test-busy bench clean workers validation-dense

install: $(VENV)/.installed

# The stamp makes every target reinstall only when the packaging changes.
# The install compiles the simulator's core in place (setup.py, Cython);
# `make build` recompiles it with the venv's setuptools, which must read
# pyproject.toml's SPDX license (setuptools >= 77).
$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip 'setuptools>=77.0.3'
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

# The Ray and SLURM sweep launchers (extras ray and slurm; ~1 GB with Ray's
# dependencies): `make test` installs them for tests/test_sweep_ray.py and
# tests/test_sweep_submitit.py; `make demo` does without.
launchers: $(VENV)/.launchers
$(VENV)/.launchers: $(VENV)/.installed
	$(BIN)/python -m pip install -e '.[dev,ray,slurm]'
	touch $@

# The compiled core (sim/compiled.py: every .pxd is the type declarations of
# the .py beside it) is rebuilt when one of its sources changes; importing a
# compiled module older than its sources fails instead of running old code.
CORE_PXD := $(wildcard sim/*.pxd sim/workloads/*.pxd policies/kernel/*.pxd)
CORE_SRC := $(CORE_PXD) $(CORE_PXD:.pxd=.py)
build: $(VENV)/.compiled
$(VENV)/.compiled: $(VENV)/.installed $(CORE_SRC) setup.py
	$(BIN)/python setup.py -q build_ext --inplace
	touch $@

# Native workers of the real-host backend (backends/workers/; gcc).  The
# backend also builds them on first use (backends/real/workers.py).
WORKERS := backends/workers/build/funcworker backends/workers/build/memworker
WORKER_CC ?= gcc
workers: $(WORKERS)

# Without gcc the real backend cannot run; its tests skip, so make test goes on.
backends/workers/build/%: backends/workers/%.c
	@if ! command -v $(WORKER_CC) >/dev/null; then \
	  echo "note: $(WORKER_CC) not found: backends/workers not built (backend=real needs it)"; \
	else mkdir -p $(@D) && echo "$(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<" && \
	  $(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<; fi

# Native programs of the calibration microbenchmarks (calibration/bench/native/;
# gcc).  The benchmarks also build them on first use (calibration/bench/common.py).
# `bench` is taken by the pytest benchmarks, so this target is microbench.
.PHONY: microbench
MICROBENCH := $(patsubst %.c,calibration/bench/native/build/%,$(notdir $(wildcard calibration/bench/native/*.c)))
microbench: $(MICROBENCH)

# Without gcc the benchmarks refuse to run and their tests skip; make test goes on.
calibration/bench/native/build/%: calibration/bench/native/%.c calibration/bench/native/handshake.h
	@if ! command -v $(WORKER_CC) >/dev/null; then \
	  echo "note: $(WORKER_CC) not found: calibration/bench/native not built (the calibration benchmarks need it)"; \
	else mkdir -p $(@D) && echo "$(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<" && \
	  $(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<; fi

# The RDT sidecar of the real-host backend (backends/rdt-sidecar/; Go on
# intel/goresctrl).  The backend also builds it on first use (backends/real/rdt.py).
.PHONY: rdt-sidecar
RDT_SIDECAR := backends/rdt-sidecar/build/colosim-rdt-sidecar
GO ?= $(shell command -v go 2>/dev/null || { test -x /usr/local/go/bin/go && echo /usr/local/go/bin/go; })
rdt-sidecar: $(RDT_SIDECAR)

# Without go, RDT on the real backend fails saying so and its tests skip; make test goes on.
$(RDT_SIDECAR): $(filter-out %_test.go,$(wildcard backends/rdt-sidecar/*.go)) backends/rdt-sidecar/go.mod backends/rdt-sidecar/go.sum
	@if [ -z "$(GO)" ]; then \
	  echo "note: go not found: backends/rdt-sidecar not built (RDT on backend=real needs it)"; \
	else mkdir -p $(@D) && echo "cd backends/rdt-sidecar && $(GO) build -o build/colosim-rdt-sidecar ." && \
	  cd backends/rdt-sidecar && $(GO) build -o build/colosim-rdt-sidecar .; fi

# perf's Python binding (Debian/Ubuntu linux-perf: module perf, for the system
# Python 3.11), which backend=real counts each task through
# (backends/real/taskcount.py) and trace=sched reads the scheduler's
# tracepoints through (backends/real/schedtrace.py).  The venv gets that one
# module, linked into its site-packages, not the rest of dist-packages; without
# it, both fall back to the perf tool (perf stat -G, perf record) and say so.
PERF_BINDING ?= /usr/lib/python3/dist-packages/perf.cpython-311-x86_64-linux-gnu.so
.PHONY: perf-binding
perf-binding: $(VENV)/.perf-binding
$(VENV)/.perf-binding: $(VENV)/.installed
	@site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'); \
	if [ ! -f $(PERF_BINDING) ]; then \
	  echo "note: $(PERF_BINDING) not found (apt-get install linux-perf): backend=real counts and traces with the perf tool instead"; \
	else ln -sf $(PERF_BINDING) $$site/ && \
	  $(BIN)/python -c 'import perf; perf.cpu_map()' && echo "perf binding: $$site/$$(basename $(PERF_BINDING))" || \
	  { rm -f $$site/$$(basename $(PERF_BINDING)); echo "note: $(PERF_BINDING) does not import in $(VENV): not linked"; }; fi
	touch $@

# rt-app (Debian's package rt-app, 1.0), which backend=real workload=rtapp runs
# (backends/real/rtapp.py): installed with apt-get when root and missing.
# Without it, that run is refused with the install command and its tests
# skip, so make test goes on.
.PHONY: rt-app
rt-app:
	@if command -v rt-app >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "apt-get install -y rt-app"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y rt-app >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y rt-app >/dev/null; } || \
	  echo "note: apt-get install -y rt-app failed: backend=real workload=rtapp needs it"; \
	else echo "note: rt-app not installed (as root: apt-get install -y rt-app): backend=real workload=rtapp needs it"; fi

# A density sweep on the LAGS paper's host, light load to past saturation,
# CFS vs EEVDF vs CFS-LAGS over seeds (scenarios/conf/experiment/demo_density.yaml),
# then the comparison, the report and a reading of the results.  The
# simulator only: nothing of the real-host backend is built.  A previous
# runs/demo is kept, renamed by its time.
DEMO := runs/demo
DEMO_METRICS := latency_p99_s,goodput_rps,unfinished_frac,sched_overhead_frac
demo: $(VENV)/.compiled
	@if [ -e $(DEMO) ]; then old=$(DEMO)-$$(date -r $(DEMO) +%Y%m%d-%H%M%S); \
	  mv $(DEMO) $$old && echo "The previous $(DEMO) is kept as $$old"; fi
	$(BIN)/colosim sweep --dir $(DEMO) experiment=demo_density
	$(BIN)/colosim compare $(DEMO) --metric $(DEMO_METRICS)
	$(BIN)/colosim report $(DEMO)
	$(BIN)/colosim compare $(DEMO) --reading

test: $(VENV)/.compiled $(VENV)/.launchers $(WORKERS) $(RDT_SIDECAR) $(VENV)/.perf-binding rt-app
test: $(MICROBENCH)
	$(BIN)/python -m pytest -q

test-slow: $(VENV)/.compiled
	$(BIN)/python -m pytest -q -m slow

# The real-host tests beside one busy loop (a neighbour taking one of this
# 2-CPU machine's CPUs): they must pass or skip their comparison naming the
# measured disturbance, never fail (docs/real-backend.md, "Disturbed runs").
test-busy: $(VENV)/.compiled $(WORKERS) $(RDT_SIDECAR) $(VENV)/.perf-binding rt-app
	sh -c 'while :; do :; done' & hog=$$!; \
	$(BIN)/python -m pytest -q -m hardware; rc=$$?; kill $$hog; exit $$rc

# The dense held-out suite on this host, 3 real runs per point (~15-20 min,
# root; run it on a quiet machine: docs/host-validation.md), written to
# docs/data/validation-dense-this-vm.md; the run directories go to runs/.
validation-dense: $(VENV)/.compiled $(WORKERS) rt-app
	$(BIN)/colosim validate this-vm --suite dense --repeat 3 --format markdown \
		--write docs/data/validation-dense-this-vm.md

bench: $(VENV)/.compiled
	$(BIN)/python -m pytest benchmarks --benchmark-only -o addopts=''

# Keeps the venv and runs/ (results are not build products).
clean:
	rm -rf build *.egg-info .pytest_cache .hypothesis .benchmarks $(VENV)/.compiled $(VENV)/.perf-binding
	rm -f $(CORE_PXD:.pxd=.c) $(foreach p,$(CORE_PXD),$(wildcard $(p:.pxd=).cpython-*.so))
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
