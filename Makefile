VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install demo test test-slow bench clean workers

install: $(VENV)/.installed

# The stamp makes every target reinstall only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

# Native workers of the real-host backend (backends/workers/; gcc).  The
# backend also builds them on first use (backends/real/workers.py).
WORKERS := backends/workers/build/funcworker
WORKER_CC ?= gcc
workers: $(WORKERS)

# Without gcc the real backend cannot run; its tests skip, so make test goes on.
$(WORKERS): backends/workers/funcworker.c
	@if ! command -v $(WORKER_CC) >/dev/null; then \
	  echo "note: $(WORKER_CC) not found: backends/workers not built (backend=real needs it)"; \
	else mkdir -p $(@D) && echo "$(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<" && \
	  $(WORKER_CC) -O2 -Wall -Wextra -pthread -o $@ $<; fi

# The default scenario under each kernel scheduler, side by side, over three
# seeds so the comparison has confidence intervals.
demo: $(VENV)/.installed $(WORKERS)
	rm -rf runs/demo
	$(BIN)/colosim sweep --dir runs/demo scheduler=cfs,eevdf,lags,rr seed=0,1,2
	@echo "Results: runs/demo (summary.parquet; one run directory per run under runs/demo/runs)"
	$(BIN)/colosim compare runs/demo --metric goodput_rps,latency_p99_s,sched_overhead_frac
	$(BIN)/colosim report runs/demo

test: $(VENV)/.installed $(WORKERS)
	$(BIN)/python -m pytest -q

test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m slow

bench: $(VENV)/.installed
	$(BIN)/python -m pytest benchmarks --benchmark-only -o addopts=''

# Keeps the venv and runs/ (results are not build products).
clean:
	rm -rf build *.egg-info .pytest_cache .hypothesis .benchmarks
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
