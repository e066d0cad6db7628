"""Build hook: Cython compiles the simulator's hot core (sim/compiled.py
lists the modules; docs/performance.md, "Compiled core", explains why).
Everything else is in pyproject.toml.  COLOSIM_PURE_PYTHON=1 at build time
installs the Python sources only, and so does a machine where compiling
fails (no C compiler, say), with a warning: the simulator then runs, only
several times slower."""
import os
import runpy
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = runpy.run_path(os.path.join("sim", "compiled.py"))


# GCC's flow analysis cannot see that Cython's generated code sets a ctuple
# return value on every path that returns it (policies/kernel/eevdf.c:
# "'result.f0' may be used uninitialized"): a false positive in code we do
# not write, silenced for the generated sources only.
GCC_GENERATED_FLAGS = ["-Wno-maybe-uninitialized"]


class OptionalBuildExt(build_ext):
    def build_extensions(self):
        if "gcc" in os.path.basename(self.compiler.compiler_so[0]):
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, *GCC_GENERATED_FLAGS]
        super().build_extensions()

    def run(self):
        # a failure stops the whole build before anything is copied into
        # place, so the core is compiled entirely or not at all
        try:
            super().run()
        except Exception as err:   # noqa: BLE001 - any compiler failure
            print(f"warning: the compiled core was not built ({err}); colosim runs its "
                  "Python sources, several times slower", file=sys.stderr)


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


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
