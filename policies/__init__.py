"""Scheduling policies (policies/kernel) and controllers (policies/control)."""
# policies.kernel.cfs is compiled: importing sim first installs the import
# guard of sim/compiled.py, even when a policy is the first thing imported
import sim as _sim  # noqa: F401
