"""Build hook: Cython compiles the simulator's hot core (sim/compiled.py
lists the modules; docs/architecture.md, "Compiled core", explains why).
Everything else is in pyproject.toml.  COLOSIM_PURE_PYTHON=1 at build time
installs the Python sources only."""
import os
import runpy

from setuptools import setup

COMPILED = runpy.run_path(os.path.join("sim", "compiled.py"))


def ext_modules():
    if os.environ.get(COMPILED["PURE_ENV"], "") not in ("", "0"):
        return []
    from Cython.Build import cythonize
    return cythonize(
        [module.replace(".", "/") + ".py" for module in COMPILED["COMPILED_MODULES"]],
        compiler_directives={
            "language_level": 3,
            # the .py annotations are for readers and mypy; C types come
            # from the .pxd files only
            "annotation_typing": False,
            "infer_types": True,
            "binding": False,
        },
        quiet=True)


setup(ext_modules=ext_modules())
