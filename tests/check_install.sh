#!/usr/bin/env bash
# cudalloc as a library: `cmake --install` into a temporary prefix, then a downstream project
# builds against it with find_package(cudalloc) and with pkg-config and runs on the simulated
# device; the ABI is versioned; `pip wheel` gives a package with the libraries and the CLI
# inside, which imports and runs with no environment variable.
#   check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# Pipelines end in grep without -q: grep -q stops reading at the first match, its writer then
# dies of SIGPIPE, and pipefail would fail a check that matched.
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/cudalloc-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
export CUDALLOC_DEVICE=fake:1G CUDALLOC_LOG=error
fail() { echo "FAIL $*"; exit 1; }
pass() { echo "PASS $*"; }

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || fail "cmake --install"
lib=$(find "$prefix" -name libcudalloc.so -print -quit)
libdir=$(dirname "$lib")
for f in include/cudalloc/cudalloc.h "${libdir#$prefix/}/cmake/cudalloc/cudallocConfig.cmake" \
         "${libdir#$prefix/}/cmake/cudalloc/cudallocConfigVersion.cmake" \
         "${libdir#$prefix/}/pkgconfig/cudalloc.pc" "${libdir#$prefix/}/libcudalloc.so.0" \
         "${libdir#$prefix/}/libcudalloc_preload.so" bin/cudalloc; do
  [ -e "$prefix/$f" ] || fail "installed tree lacks $f"
done
pass "installed: header, CMake package, pkg-config file, libraries, CLI"

readelf -d "$lib" | grep 'SONAME.*libcudalloc.so.0' >/dev/null || fail "SONAME is not libcudalloc.so.0"
objdump -T "$lib" | grep -E 'CUDALLOC_0 +cudalloc_allocate$' >/dev/null || fail "cudalloc_allocate is not versioned CUDALLOC_0"
if objdump -T "$lib" | awk '$NF !~ /^cudalloc_/ && $4 == ".text"' | grep . >/dev/null; then
  fail "libcudalloc.so exports more than the C API"
fi
pass "ABI: SONAME libcudalloc.so.0, symbols versioned CUDALLOC_0, only cudalloc_*"

cmake -S "$src/examples/downstream" -B "$tmp/ds" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/ds.log" ||
  { cat "$tmp/ds.log"; fail "find_package(cudalloc) in a downstream project"; }
cmake --build "$tmp/ds" > "$tmp/ds-build.log" || { cat "$tmp/ds-build.log"; fail "downstream build"; }
"$tmp/ds/downstream" | tee "$tmp/ds.out" | grep "ok$" >/dev/null || fail "downstream program"
grep -q "preload library: $prefix" "$tmp/ds.out" || fail "cudalloc::preload points into the prefix"
pass "find_package(cudalloc 0.1) and cudalloc::cudalloc: built and ran"
if cmake -S "$src/examples/downstream" -B "$tmp/ds-wrong" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCUDALLOC_WANT=0.2 > "$tmp/wrong.log" 2>&1; then
  fail "find_package(cudalloc 0.2) accepted version 0.1"
fi
pass "find_package(cudalloc 0.2) refuses 0.1 (another ABI)"

if command -v pkg-config > /dev/null; then
  flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs cudalloc)
  cc "$src/examples/downstream/main.c" $flags -Wl,-rpath,"$libdir" -o "$tmp/pc"
  "$tmp/pc" | grep "ok$" >/dev/null || fail "the pkg-config build"
  pass "pkg-config --cflags --libs cudalloc: built and ran"
else
  echo "SKIP pkg-config (not installed)"
fi

# The Python package. A Debian python3 with pip, setuptools and wheel (no index needed).
py=""
for cand in /usr/bin/python3 python3; do
  if "$cand" -c "import setuptools, wheel, pip" 2> /dev/null; then py=$cand; break; fi
done
if [ -z "$py" ]; then echo "SKIP pip wheel (no python3 with pip, setuptools and wheel)"; exit 0; fi
(cd "$src" && CUDALLOC_BUILD_DIR="$build" CUDALLOC_TORCH_DIR=0 "$py" -m pip wheel -q \
   --no-build-isolation --no-deps -w "$tmp/wheel" .) > "$tmp/wheel.log" 2>&1 ||
  { tail -30 "$tmp/wheel.log"; fail "pip wheel ."; }
whl=$(ls "$tmp"/wheel/cudalloc-*.whl)
"$py" -m pip install -q --no-deps --no-index --target "$tmp/site" "$whl" > "$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; fail "pip install of the wheel"; }
for f in cudalloc/libcudalloc.so cudalloc/libcudalloc_preload.so cudalloc/cudalloc-cli \
         cudalloc/__main__.py; do
  [ -e "$tmp/site/$f" ] || fail "the wheel lacks $f"
done
grep -q "cudalloc = cudalloc.__main__:main" "$tmp"/site/cudalloc-*.dist-info/entry_points.txt ||
  fail "the wheel has no cudalloc console script"
[ -x "$tmp/site/bin/cudalloc" ] || fail "pip installed no cudalloc command"
pass "pip wheel: $(basename "$whl") with the libraries, the CLI and a console script"
(cd "$tmp" && env -u CUDALLOC_LIBRARY PYTHONPATH="$tmp/site" "$py" - "$tmp/site" <<'PY'
import sys, cudalloc
site = sys.argv[1]
assert cudalloc.library_path().startswith(site), cudalloc.library_path()
assert cudalloc.preload_path() == site + "/cudalloc/libcudalloc_preload.so", cudalloc.preload_path()
assert cudalloc.stats()["allocated_bytes"]["current"] == 0
print("import cudalloc: library and preload library inside the package")
PY
) || fail "import cudalloc from the wheel"
(cd "$tmp" && PYTHONPATH="$tmp/site" "$py" -m cudalloc --help) 2>&1 | grep "usage: cudalloc" >/dev/null ||
  fail "python -m cudalloc --help"
(cd "$tmp" && PYTHONPATH="$tmp/site" "$tmp/site/bin/cudalloc" --help) 2>&1 |
  grep "usage: cudalloc" >/dev/null || fail "the cudalloc command"
pass "import cudalloc, preload_path(), python -m cudalloc and the cudalloc command from the wheel"
