"""Build the Cython core (iogen/_core/*.pyx). Everything else lives in pyproject.toml."""
import ast
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

# IOGEN_DEBUG_BUILD=1 builds the core with bounds checks and line tracing (CI tests it too).
# The audited hot functions turn the checks off with @cython.boundscheck(IOGEN_DEBUG_BUILD): a
# compile-time name, so a decorator never overrides the debug build's checks. Switching builds in
# place needs the generated .c removed first (cythonize does not see compile_time_env change).
DEBUG = os.environ.get("IOGEN_DEBUG_BUILD") == "1"
# IOGEN_SANITIZE=1 builds the release core (the audited unchecked paths included) with
# AddressSanitizer and UBSan, for `make test-asan`; loading it needs libasan preloaded.
SANITIZE = os.environ.get("IOGEN_SANITIZE") == "1"

# The core's modules are listed once, in iogen/_core/__init__.py (read here without importing iogen).
_CORE_LISTS = {t.id: ast.literal_eval(node.value)
               for node in ast.parse(open("iogen/_core/__init__.py", encoding="utf-8").read()).body
               if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
CORE_MODULES = list(_CORE_LISTS["MODULES"] + _CORE_LISTS["PROBES"])

directives = {"language_level": "3", "embedsignature": True, "binding": True}
macros = []
cflags = ["-O3", "-fno-strict-aliasing"]
if DEBUG:
    directives.update(boundscheck=True, wraparound=True, linetrace=True)
    macros.append(("CYTHON_TRACE_NOGIL", "1"))
    cflags = ["-O0", "-g"]
link_args = []
if SANITIZE:
    link_args = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    cflags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fno-strict-aliasing"] + link_args

extensions = [
    Extension(
        f"iogen._core.{name}",
        [f"iogen/_core/{name}.pyx"],
        include_dirs=[numpy.get_include(), "iogen/_core"],
        define_macros=macros + [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=cflags,
        extra_link_args=link_args,
    )
    for name in CORE_MODULES
]

setup(
    packages=find_packages(include=["iogen", "iogen.*"]) + ["iogen.workloads"],
    package_dir={"iogen.workloads": "workloads"},
    # the generated C of the core is a build product, not something to ship
    exclude_package_data={"iogen._core": ["*.c", "*.html"]},
    package_data={
        "iogen._core": ["*.pxd", "*.pyx", "*.h"],
        "iogen.workloads": ["*.yaml"],
        "iogen.report": ["templates/*"],
    },
    ext_modules=cythonize(extensions, compiler_directives=directives, quiet=True,
                          compile_time_env={"IOGEN_DEBUG_BUILD": DEBUG}),
    zip_safe=False,
)
