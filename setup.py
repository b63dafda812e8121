"""The build step of `pip install .` (pyproject.toml has the metadata): CMake builds the
libraries and the CLI, and they are copied into the cudalloc package.

Environment:
  CUDALLOC_BUILD_DIR   the CMake build folder to use (default build-wheel); an existing,
                       configured one is reused as it is
  CUDALLOC_TORCH_DIR   the torch package to build the PyTorch adapter against (default: the
                       one `import torch` finds, if any; "" or "0": no adapter)
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
# What goes into the package: (file in the build folder, name in the package).
SHIPPED = [("libcudalloc.so", "libcudalloc.so"),
           ("libcudalloc_preload.so", "libcudalloc_preload.so"),
           ("cudalloc", "cudalloc-cli"),
           ("libcudalloc_torch.so", "libcudalloc_torch.so")]


def torch_dir():
    env = os.environ.get("CUDALLOC_TORCH_DIR")
    if env is not None:
        return "" if env in ("", "0") else env
    try:
        out = subprocess.run([sys.executable, "-c",
                              "import torch, os; print(os.path.dirname(torch.__file__))"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = os.path.abspath(os.environ.get("CUDALLOC_BUILD_DIR") or
                                os.path.join(ROOT, "build-wheel"))
        torch = torch_dir()
        if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
            args = ["-DCMAKE_BUILD_TYPE=Release", "-DCUDALLOC_BUILD_TESTS=OFF",
                    "-DCUDALLOC_BUILD_CUDA=OFF", f"-DCUDALLOC_TORCH_DIR={torch}"]
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build] + args)
        targets = ["cudalloc", "cudalloc_preload", "cudalloc_cli"]
        if torch or os.path.isfile(os.path.join(build, "libcudalloc_torch.so")):
            targets.append("cudalloc_torch")
        subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 2),
                               "--target"] + targets)
        package = os.path.join(self.build_lib, "cudalloc")
        for built, shipped in SHIPPED:
            source = os.path.join(build, built)
            if os.path.isfile(source):
                shutil.copy2(os.path.realpath(source), os.path.join(package, shipped))


class BinaryDistribution(Distribution):
    """The package holds native libraries: the wheel is platform-specific."""

    def has_ext_modules(self):
        return True


# setuptools' own build folder: not build/, which is the checkout's CMake build.
setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution,
      options={"build": {"build_base": "build-python"}, "egg_info": {"egg_base": "build-python"}})
