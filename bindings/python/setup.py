"""Builds volt's Python package with CMake and ships libvolt inside it.

The compiled module (_volt) and libvolt.so are built by the repository's CMake project: in
build/ when that tree exists (an incremental build of the targets the package needs), otherwise
in build-python/. Both are copied into the wheel beside the Python sources; _volt finds libvolt
through its $ORIGIN rpath.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(volt VERSION ([0-9.]+)", f.read()).group(1)


def cmake_build():
    """The build tree holding python/volt/_volt*.so for this interpreter, brought up to date:
    the repository's build/ (or $VOLT_BUILD_DIR) when it has one, else build-python/."""
    module = "_volt" + sysconfig.get_config_var("EXT_SUFFIX")
    build = os.environ.get("VOLT_BUILD_DIR") or os.path.join(ROOT, "build")
    if not os.path.isfile(os.path.join(build, "python", "volt", module)):
        build = os.path.join(ROOT, "build-python")
        subprocess.check_call(
            ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DVOLT_PYTHON=ON",
             "-DVOLT_BUILD_TESTS=OFF", "-DVOLT_BUILD_BENCH=OFF", f"-DPYTHON_EXECUTABLE={sys.executable}"]
        )
    subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", "volt_python"])
    return build


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = cmake_build()
        target = os.path.join(self.build_lib, "volt")
        os.makedirs(target, exist_ok=True)
        shipped = glob.glob(os.path.join(build, "python", "volt", "_volt*.so"))
        # libvolt under its soname (what _volt asks for) and the CUDA plugin it loads beside it.
        shipped += glob.glob(os.path.join(build, "lib", "libvolt.so.[0-9]"))
        shipped += glob.glob(os.path.join(build, "lib", "libvolt_cuda.so*"))
        if not any("_volt" in os.path.basename(p) for p in shipped):
            raise RuntimeError(f"{build}: the Python module was not built (is pybind11-dev installed?)")
        for path in shipped:
            shutil.copy2(os.path.realpath(path), os.path.join(target, os.path.basename(path)))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it holds compiled code


setup(version=project_version(), cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
