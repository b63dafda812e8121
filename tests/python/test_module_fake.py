#!/usr/bin/env python3
"""The cudalloc Python module on the simulated device: no torch, no GPU (plain unittest;
CTest runs it as python.module_fake).

    CUDALLOC_DEVICE=fake:1G CUDALLOC_LIBRARY=build/libcudalloc.so \\
        python3 tests/python/test_module_fake.py [-v]

Checks the ctypes mirror of cudalloc.h against the library itself (statistics count, struct
layout, field order), then every call that needs no torch: stats(), memory_summary(),
snapshot(), dump_snapshot(), validate(), limits, empty_cache(), and that failures raise
Python exceptions with the library's error code and message. Memory is allocated through
the C API (cudalloc_allocate), as PyTorch would.
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
import cudalloc  # noqa: E402

MIB = 1 << 20
# cudalloc_error_t values (cudalloc.h).
INVALID_VALUE, MEMORY_ALLOCATION, INVALID_DEVICE_POINTER, INVALID_DEVICE = 1, 2, 17, 101


def lib():
    """The library the module loaded, with the allocation calls it does not declare."""
    handle = cudalloc._capi._lib()
    handle.cudalloc_allocate.restype = ctypes.c_int
    handle.cudalloc_allocate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                         ctypes.c_int, ctypes.c_void_p]
    handle.cudalloc_deallocate.restype = ctypes.c_int
    handle.cudalloc_deallocate.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return handle


def allocate(nbytes):
    ptr = ctypes.c_void_p()
    code = lib().cudalloc_allocate(ctypes.byref(ptr), nbytes, 0, None)
    if code != 0:
        raise cudalloc.CudallocError(f"cudalloc_allocate: {code}", code)
    return ptr.value


def free(ptr):
    assert lib().cudalloc_deallocate(ptr, -1) == 0


class MirrorTest(unittest.TestCase):
    """The ctypes structures and signatures agree with the library."""

    def test_library_is_the_one_asked_for(self):
        self.assertEqual(cudalloc.library_path(), os.path.abspath(os.environ["CUDALLOC_LIBRARY"]))

    def test_struct_layout_matches_cudalloc_h(self):
        stat = cudalloc._capi._Stat
        self.assertEqual([f[0] for f in stat._fields_], ["current", "peak", "total"])
        self.assertEqual(ctypes.sizeof(stat), 24)
        stats = cudalloc._capi._Stats
        self.assertEqual([f[0] for f in stats._fields_], ["count", "device", "values"])
        self.assertEqual(stats.values.offset, 8)
        self.assertEqual(ctypes.sizeof(stats), 8 + 24 * cudalloc._capi.MAX_STATS)

    def test_stat_count_and_names(self):
        count = lib().cudalloc_stat_count()
        self.assertGreater(count, 0)
        self.assertLessEqual(count, cudalloc._capi.MAX_STATS)
        names = cudalloc.stat_names()
        self.assertEqual(len(names), count)
        self.assertEqual(len(set(names)), count)
        raw = [lib().cudalloc_stat_name(i).decode() for i in range(count)]
        self.assertEqual(names, raw)
        self.assertIsNone(lib().cudalloc_stat_name(count))  # past the end: NULL
        self.assertEqual(list(cudalloc.stats()), names)

    def test_get_stats_fills_count_and_device(self):
        out = cudalloc._capi._Stats()
        out.count = -1
        out.device = -7
        self.assertEqual(lib().cudalloc_get_stats(-1, ctypes.byref(out)), 0)
        self.assertEqual(out.count, lib().cudalloc_stat_count())
        self.assertEqual(out.device, 0)

    def test_field_order_current_peak_total(self):
        """Two blocks live, one freed: current, peak and total all differ, so a swapped pair
        of fields would show."""
        cudalloc.reset_peak_stats()
        before = cudalloc.stats()["allocated_bytes"]
        a, b = allocate(4 * MIB), allocate(8 * MIB)
        free(b)
        after = cudalloc.stats()["allocated_bytes"]
        free(a)
        self.assertEqual(after["current"] - before["current"], 4 * MIB)
        self.assertEqual(after["peak"] - before["current"], 12 * MIB)
        self.assertEqual(after["total"] - before["total"], 12 * MIB)

    def test_every_declared_symbol_exists(self):
        for name in cudalloc._capi._SIGNATURES:
            self.assertTrue(hasattr(lib(), name), name)

    def test_public_names(self):
        for name in cudalloc.__all__:
            self.assertTrue(hasattr(cudalloc, name), name)
        self.assertEqual(cudalloc.MAX_STATS, 64)  # CUDALLOC_MAX_STATS

    def test_library_of_another_api_version_is_refused(self):
        class Other:
            def __init__(self, version):
                self.cudalloc_version = lambda: version
        cudalloc._capi._check_version(Other(100), "/x/libcudalloc.so")  # 0.1.0: accepted
        cudalloc._capi._check_version(Other(107), "/x/libcudalloc.so")  # 0.1.7: a patch
        for version in (200, 10100, 99):  # 0.2.0, 1.1.0, 0.0.99
            with self.assertRaises(cudalloc.CudallocError) as e:
                cudalloc._capi._check_version(Other(version), "/x/libcudalloc.so")
            self.assertIn("/x/libcudalloc.so", str(e.exception))
            self.assertIn("0.1", str(e.exception))

    def test_paths_beside_the_library(self):
        self.assertTrue(cudalloc.preload_path().endswith("libcudalloc_preload.so"))
        self.assertTrue(os.access(cudalloc.cli_path(), os.X_OK))

    def test_version(self):
        major, minor, patch = (int(p) for p in cudalloc.version().split("."))
        self.assertEqual(major * 10000 + minor * 100 + patch, lib().cudalloc_version())

    def test_device_count(self):
        self.assertEqual(cudalloc.device_count(), 1)


class CallsTest(unittest.TestCase):
    def test_stats_follow_allocations(self):
        ptr = allocate(3 * MIB)
        s = cudalloc.stats()
        self.assertGreaterEqual(s["allocated_bytes"]["current"], 3 * MIB)
        self.assertGreaterEqual(s["reserved_bytes"]["current"], s["allocated_bytes"]["current"])
        self.assertEqual(cudalloc.stats(0), cudalloc.stats(-1))
        free(ptr)
        self.assertLess(cudalloc.stats()["allocated_bytes"]["current"], 3 * MIB)

    def test_torch_memory_stats_uses_pytorchs_keys(self):
        ptr = allocate(5 * MIB)
        nested = cudalloc.torch_memory_stats()
        ours = cudalloc.stats()
        alloc = nested["allocated_bytes"]["all"]
        self.assertEqual(alloc["current"], ours["allocated_bytes"]["current"])
        self.assertEqual(alloc["allocated"], ours["allocated_bytes"]["total"])
        self.assertEqual(alloc["freed"], alloc["allocated"] - alloc["current"])
        self.assertEqual(nested["allocated_bytes"]["large_pool"], alloc)
        self.assertEqual(nested["allocated_bytes"]["small_pool"]["current"], 0)
        self.assertEqual(nested["segment"]["all"]["current"], ours["reserved_count"]["current"])
        self.assertEqual(nested["num_ooms"], ours["ooms"]["total"])
        for key in ("reserved_bytes", "active_bytes", "requested_bytes", "allocation",
                    "inactive_split_bytes", "num_alloc_retries", "num_device_alloc"):
            self.assertIn(key, nested)
        free(ptr)

    def test_reset_peak_stats(self):
        free(allocate(16 * MIB))
        self.assertGreaterEqual(cudalloc.stats()["allocated_bytes"]["peak"], 16 * MIB)
        cudalloc.reset_peak_stats()
        s = cudalloc.stats()["allocated_bytes"]
        self.assertEqual(s["peak"], s["current"])

    def test_memory_summary(self):
        ptr = allocate(MIB)
        text = cudalloc.memory_summary()
        free(ptr)
        lines = text.splitlines()
        self.assertIn("cudalloc CUDA memory summary, device ID 0", lines[1])
        self.assertTrue(any(line.startswith("| Allocated memory") for line in lines))
        self.assertTrue(any(line.startswith("| GPU reserved memory") for line in lines))
        self.assertEqual(len({len(line) for line in lines}), 1, text)  # one width
        self.assertTrue(text.endswith("|\n"))

    def test_snapshot(self):
        ptr = allocate(5 * MIB)
        snap = cudalloc.snapshot()
        free(ptr)
        self.assertIn("segments", snap)
        self.assertIn("device_traces", snap)
        blocks = [b for s in snap["segments"] for b in s["blocks"]
                  if b["state"] == "active_allocated"]
        self.assertIn(ptr, [b["address"] for b in blocks])
        devices = snap["cudalloc"]["devices"]
        self.assertEqual(devices[0]["stats"]["allocated_bytes"]["total"],
                         cudalloc.stats()["allocated_bytes"]["total"])

    def test_dump_snapshot(self):
        with tempfile.TemporaryDirectory() as d:
            cudalloc.dump_snapshot(os.path.join(d, "snap_%p.json"))
            path = os.path.join(d, f"snap_{os.getpid()}.json")
            with open(path) as f:
                self.assertIn("segments", json.load(f))

    def test_validate(self):
        ptr = allocate(MIB)
        cudalloc.validate()
        cudalloc.validate(0)
        free(ptr)

    def test_memory_limit(self):
        try:
            cudalloc.empty_cache()
            cudalloc.set_memory_limit(64 * MIB)
            with self.assertRaises(cudalloc.CudallocError) as caught:
                allocate(128 * MIB)
            self.assertEqual(caught.exception.code, MEMORY_ALLOCATION)
            free(allocate(16 * MIB))  # below the limit: fine
        finally:
            cudalloc.set_memory_limit(0)
        free(allocate(128 * MIB))  # no cap any more

    def test_memory_fraction(self):
        try:
            cudalloc.empty_cache()
            cudalloc.set_memory_fraction(0.25)  # of 1 GiB
            with self.assertRaises(cudalloc.CudallocError):
                allocate(512 * MIB)
            free(allocate(128 * MIB))
        finally:
            cudalloc.set_memory_fraction(1.0)
        free(allocate(512 * MIB))

    def test_empty_cache_returns_free_segments(self):
        free(allocate(32 * MIB))
        self.assertGreater(cudalloc.stats()["reserved_bytes"]["current"], 0)
        cudalloc.empty_cache()
        self.assertEqual(cudalloc.stats()["reserved_bytes"]["current"], 0)
        cudalloc.empty_cache(0)


class ErrorsTest(unittest.TestCase):
    """Bad input raises a Python exception carrying the library's code and message, and
    leaves the allocator consistent."""

    def tearDown(self):
        cudalloc.validate()

    def assert_error(self, call, code, words):
        with self.assertRaises(cudalloc.CudallocError) as caught:
            call()
        self.assertEqual(caught.exception.code, code)
        for word in words:
            self.assertIn(word, str(caught.exception))
        return caught.exception

    def test_bad_device(self):
        for call in (lambda: cudalloc.stats(7), lambda: cudalloc.validate(7),
                     lambda: cudalloc.empty_cache(7), lambda: cudalloc.set_memory_limit(1, 7),
                     lambda: cudalloc.memory_summary(7), lambda: cudalloc.reset_peak_stats(7)):
            # The library reports an ordinal it does not have as an invalid device (101).
            self.assert_error(call, INVALID_DEVICE, ["device 7 does not exist"])

    def test_negative_limit(self):
        with self.assertRaises(ValueError):
            cudalloc.set_memory_limit(-1)

    def test_bad_fraction(self):
        for fraction in (-0.5, 1.5, float("nan")):
            self.assert_error(lambda: cudalloc.set_memory_fraction(fraction), INVALID_VALUE,
                              ["cudalloc_set_memory_fraction"])

    def test_offload_needs_a_live_allocation(self):
        ptr = allocate(MIB)
        free(ptr)
        for call in (cudalloc.offload, cudalloc.prefetch, cudalloc.residency):
            self.assert_error(lambda: call(ptr), INVALID_DEVICE_POINTER, [call.__name__])

    def test_offload_argument_types(self):
        with self.assertRaises(TypeError):
            cudalloc.offload("not a pointer")
        with self.assertRaises(TypeError):
            cudalloc.offload(4096, stream="not a stream")

    def test_residency_of_a_live_allocation(self):
        ptr = allocate(4 * MIB)
        try:
            r = cudalloc.residency(ptr)
        finally:
            free(ptr)
        self.assertEqual(r, {"device_bytes": 4 * MIB, "host_bytes": 0})

    def test_bad_snapshot_path(self):
        self.assert_error(lambda: cudalloc.dump_snapshot("/no/such/folder/snap.json"),
                          INVALID_VALUE, ["cudalloc_snapshot"])

    def test_error_text_is_the_last_error(self):
        e = self.assert_error(lambda: cudalloc.validate(9), INVALID_DEVICE, [])
        self.assertIn(lib().cudalloc_last_error_string().decode(), str(e))

    def test_enable_without_torch_is_an_import_error(self):
        code = ("import sys; sys.modules['torch'] = None; import cudalloc\n"
                "try:\n    cudalloc.enable()\nexcept ImportError:\n    sys.exit(0)\n"
                "sys.exit(1)\n")
        self.assertEqual(self.run_python(code).returncode, 0)
        self.assertFalse(cudalloc.is_enabled())

    def test_missing_library(self):
        proc = self.run_python("import cudalloc; cudalloc.stats()",
                               CUDALLOC_LIBRARY="/no/such/libcudalloc.so")
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("cudalloc.CudallocError: cannot load libcudalloc.so", proc.stderr)
        self.assertIn("CUDALLOC_LIBRARY is set", proc.stderr)

    @staticmethod
    def run_python(code, **env):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tools", "python"), **env)
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60)


def main():
    if not os.environ.get("CUDALLOC_LIBRARY") or os.environ.get("CUDALLOC_DEVICE") != "fake:1G":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        print("(needs CUDALLOC_LIBRARY and CUDALLOC_DEVICE=fake:1G)", file=sys.stderr)
        return 2
    program = unittest.main(exit=False)
    return 0 if program.result.wasSuccessful() else 1


class RegionsTest(unittest.TestCase):
    """Sleep and wake: region(), prepare_pause(), pause(), resume(), region_residency(),
    is_paused()."""

    def test_pause_keep_and_resume_keep_bytes_and_addresses(self):
        with cudalloc.region("py-weights"):
            ptr = allocate(6 * MIB)
        ctypes.memset(ptr, 0x5A, 6 * MIB)
        device, host = cudalloc.region_residency("py-weights")
        self.assertGreaterEqual(device, 6 * MIB)
        self.assertEqual(host, 0)
        before = cudalloc.stats()["reserved_bytes"]["current"]
        cudalloc.pause("py-weights", keep=True)
        self.assertTrue(cudalloc.is_paused("py-weights"))
        self.assertEqual(cudalloc.region_residency("py-weights"), (0, device))
        self.assertEqual(before - cudalloc.stats()["reserved_bytes"]["current"], device)
        self.assertEqual(ctypes.string_at(ptr, 16), b"\x5a" * 16)  # host pages, same address
        snap = cudalloc.snapshot()
        regions = {r["tag"]: r for r in snap["cudalloc"]["regions"]}
        self.assertEqual(regions["py-weights"]["state"], "paused")
        self.assertEqual(regions["py-weights"]["host_bytes"], device)
        cudalloc.resume("py-weights")
        self.assertFalse(cudalloc.is_paused("py-weights"))
        self.assertEqual(cudalloc.region_residency("py-weights"), (device, 0))
        self.assertEqual(ctypes.string_at(ptr + 6 * MIB - 16, 16), b"\x5a" * 16)
        free(ptr)

    def test_prepare_pause_pins_the_host_memory_ahead(self):
        with cudalloc.region("py-prepared"):
            ptr = allocate(6 * MIB)
        ctypes.memset(ptr, 0x6B, 6 * MIB)
        device, _ = cudalloc.region_residency("py-prepared")
        cudalloc.empty_cache()  # host memory cached by the other tests' pauses goes back
        host_before = cudalloc.stats()["host_reserved_bytes"]["current"]
        cudalloc.prepare_pause("py-prepared")
        pinned = cudalloc.stats()["host_reserved_bytes"]["current"]
        self.assertGreaterEqual(pinned - host_before, device)
        self.assertEqual(cudalloc.region_residency("py-prepared"), (device, 0))  # not moved
        cudalloc.pause("py-prepared", keep=True)
        self.assertEqual(cudalloc.stats()["host_reserved_bytes"]["current"], pinned)
        self.assertEqual(ctypes.string_at(ptr, 16), b"\x6b" * 16)
        with self.assertRaises(cudalloc.CudallocError) as ctx:
            cudalloc.prepare_pause("py-prepared")
        self.assertEqual(ctx.exception.code, INVALID_VALUE)
        cudalloc.resume("py-prepared")
        self.assertEqual(ctypes.string_at(ptr + 6 * MIB - 16, 16), b"\x6b" * 16)
        with self.assertRaises(cudalloc.CudallocError):
            cudalloc.prepare_pause("py-never-prepared")
        free(ptr)

    def test_dropped_region_comes_back_zeroed(self):
        with cudalloc.region("py-cache"):
            ptr = allocate(3 * MIB)
        ctypes.memset(ptr, 0x33, 3 * MIB)
        cudalloc.pause("py-cache", keep=False)
        self.assertEqual(cudalloc.region_residency("py-cache"), (0, 0))
        cudalloc.resume("py-cache")
        self.assertEqual(ctypes.string_at(ptr, 64), b"\0" * 64)
        free(ptr)

    def test_misuse_raises_with_the_library_message(self):
        with self.assertRaises(cudalloc.CudallocError) as ctx:
            cudalloc.pause("py-never-used")
        self.assertEqual(ctx.exception.code, INVALID_VALUE)
        self.assertIn("py-never-used", str(ctx.exception))
        with self.assertRaises(TypeError):
            cudalloc.pause(3)
        with self.assertRaises(cudalloc.CudallocError):
            with cudalloc.region(""):
                pass
        with cudalloc.region("py-twice"):
            ptr = allocate(MIB)
        cudalloc.pause("py-twice", keep=False)
        with self.assertRaises(cudalloc.CudallocError) as ctx:
            cudalloc.pause("py-twice", keep=False)
        self.assertIn("paused already", str(ctx.exception))
        with cudalloc.region("py-twice"):
            with self.assertRaises(cudalloc.CudallocError):
                allocate(MIB)  # a paused region takes no new memory
        free(ptr)  # frees are accepted while paused
        cudalloc.resume("py-twice")


if __name__ == "__main__":
    sys.exit(main())
