VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install demo test test-slow bench clean

install: $(VENV)/.installed

# The stamp makes every target reinstall only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

# The default scenario under each kernel scheduler, side by side.
demo: $(VENV)/.installed
	rm -rf runs/demo
	$(BIN)/colosim sweep --dir runs/demo scheduler=cfs,eevdf,lags,rr
	@echo "Results: runs/demo (summary.parquet; one run directory per scheduler under runs/demo/runs)"
	$(BIN)/colosim compare runs/demo --metric goodput_rps,latency_p99_s,sched_overhead_frac
	$(BIN)/colosim report runs/demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m slow

bench: $(VENV)/.installed
	$(BIN)/python -m pytest benchmarks --benchmark-only -o addopts=''

# Keeps the venv and runs/ (results are not build products).
clean:
	rm -rf build *.egg-info .pytest_cache .hypothesis .benchmarks
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
