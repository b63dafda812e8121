#!/usr/bin/env python3
"""The pieces around the GPU checks that run without a GPU (plain unittest; CTest runs it as
python.gpu_harness): gpu_step.py, the check_*.py verdicts and junit_summary.py.

    python3 tests/python/test_gpu_harness.py [-v]
"""
import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_offload_limit  # noqa: E402
import check_preload_snapshot  # noqa: E402
import junit_summary  # noqa: E402

GPU_STEP = os.path.join(HERE, "gpu_step.py")


def gpu_step(out, *argv, env=None):
    """Runs gpu_step.py with OUT unset and `out` as its default folder."""
    env = dict(os.environ if env is None else env)
    env.pop("OUT", None)
    return subprocess.run([sys.executable, GPU_STEP, out] + list(argv), env=env,
                          capture_output=True, text=True, timeout=60)


class GpuStepTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.out = os.path.join(self.dir.name, "out")  # created by gpu_step.py

    def test_runs_in_the_out_folder_and_passes_the_exit_status_on(self):
        proc = gpu_step(self.out, "--", "sh", "-c", "pwd > where; exit 3")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        with open(os.path.join(self.out, "where")) as f:
            self.assertEqual(os.path.realpath(f.read().strip()), os.path.realpath(self.out))

    def test_out_from_the_environment_wins(self):
        elsewhere = os.path.join(self.dir.name, "elsewhere")
        env = dict(os.environ, OUT=elsewhere)
        proc = subprocess.run([sys.executable, GPU_STEP, self.out, "--", "touch", "f"],
                              env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(os.path.exists(os.path.join(elsewhere, "f")))

    def test_skips(self):
        cases = [(["--gpus", "1000"], "GPU(s), 1000 needed"),
                 (["--modules", "no_such_module_xyz"], "no_such_module_xyz not installed"),
                 (["--needs", "missing.json"], "missing.json not found")]
        for options, why in cases:
            proc = gpu_step(self.out, *options, "--", "true")
            self.assertEqual(proc.returncode, 77, options)
            self.assertIn("SKIP: ", proc.stdout)
            self.assertIn(why, proc.stdout)
        proc = gpu_step(self.out, "--", "no-such-program-xyz")
        self.assertEqual((proc.returncode, proc.stdout.strip()),
                         (77, "SKIP: no-such-program-xyz not found"))

    def test_an_absolute_program_that_is_missing_fails(self):
        proc = gpu_step(self.out, "--", "/no/such/program")
        self.assertNotIn(proc.returncode, (0, 77))

    def test_needs_and_fresh(self):
        os.makedirs(self.out)
        for name in ("input.json", "old.json"):
            open(os.path.join(self.out, name), "w").close()
        proc = gpu_step(self.out, "--needs", "input.json", "--fresh", "old.json", "--",
                        "sh", "-c", "test ! -e old.json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.out, "input.json")))

    def test_preload_reaches_only_the_command(self):
        proc = gpu_step(self.out, "--preload", "libm.so.6", "--", "sh", "-c",
                        'echo "preload=$LD_PRELOAD"')
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("preload=libm.so.6", proc.stdout)

    def test_usage(self):
        for argv in ([], ["--gpus", "1"], ["--gpus", "1", "--"]):
            self.assertEqual(gpu_step(self.out, *argv).returncode, 2, argv)


def snapshot_args(**kwargs):
    return argparse.Namespace(**dict({"min_allocations": 1, "spills": False,
                                      "max_reserved_peak": None}, **kwargs))


def stat(total=0, peak=0):
    return {"current": 0, "peak": peak, "total": total}


class CheckPreloadSnapshotTest(unittest.TestCase):
    def test_allocations(self):
        stats = {"allocated_count": stat(total=6000)}
        self.assertEqual(check_preload_snapshot.problems(stats, snapshot_args(
            min_allocations=6000)), [])
        self.assertEqual(check_preload_snapshot.problems(stats, snapshot_args(
            min_allocations=6001)), ["6000 allocations served, 6001 expected"])

    def test_spills_and_reserved_peak(self):
        args = snapshot_args(spills=True, max_reserved_peak=1 << 30)
        good = {"allocated_count": stat(total=5), "spills": stat(total=3),
                "reserved_bytes": stat(peak=1 << 30)}
        self.assertEqual(check_preload_snapshot.problems(good, args), [])
        bad = dict(good, spills=stat(), reserved_bytes=stat(peak=(1 << 30) + 1))
        self.assertEqual(len(check_preload_snapshot.problems(bad, args)), 2)
        self.assertEqual(len(check_preload_snapshot.problems(
            dict(good, reserved_bytes=stat()), args)), 1)  # a peak of 0: nothing reserved

    def test_missing_file_is_a_skip(self):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(check_preload_snapshot.main(["/no/such/snapshot.json"]), 77)
        self.assertIn("SKIP: ", out.getvalue())


def limit_doc(status="ok", spills=5, peak=90, limit=100, max_rel=0.0):
    run = {"mode": "cudalloc", "status": status, "limit_bytes": limit, "peak_reserved": peak,
           "counters_end": {"spills": spills}}
    row = {"values_vs_native": {"cudalloc": {"max_rel": max_rel}}}
    return {"runs": [{"mode": "native", "status": "ok"}, run], "rows": [row]}


class CheckOffloadLimitTest(unittest.TestCase):
    def test_verdicts(self):
        self.assertEqual(check_offload_limit.problems(limit_doc())[1], [])
        cases = {"cudalloc run oom": limit_doc(status="oom"), "no spills": limit_doc(spills=0),
                 "peak reserved above the limit": limit_doc(peak=101),
                 "losses differ from native": limit_doc(max_rel=2e-3)}
        for why, doc in cases.items():
            self.assertEqual(check_offload_limit.problems(doc)[1], [why])
        empty = {"runs": [], "rows": []}
        self.assertEqual(check_offload_limit.problems(empty)[1],
                         ["no cudalloc run", "losses differ from native"])

    def test_missing_file_is_a_skip(self):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(check_offload_limit.main(["/no/such/file.json"]), 77)
        self.assertIn("SKIP: ", out.getvalue())


JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="3">
  <testcase name="gpu-test" classname="gpu-test" time="2.6" status="run"/>
  <testcase name="bench" classname="bench" time="0.1" status="fail">
    <failure message="Failed"/></testcase>
  <testcase name="ddp-gpt2" classname="ddp-gpt2" time="0.3" status="notrun">
    <skipped message="SKIP_RETURN_CODE=77"/></testcase>
</testsuite>
"""


class JunitSummaryTest(unittest.TestCase):
    def test_table(self):
        with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
            f.write(JUNIT)
            f.flush()
            proc = subprocess.run([sys.executable, junit_summary.__file__, f.name],
                                  capture_output=True, text=True, timeout=60)
        lines = proc.stdout.splitlines()
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(lines[1].split(), ["step", "result", "seconds"])
        self.assertEqual([line.split() for line in lines[2:5]],
                         [["gpu-test", "PASS", "3"], ["bench", "FAIL", "0"],
                          ["ddp-gpt2", "SKIP", "0"]])
        self.assertEqual(lines[5], "1 PASS, 1 FAIL, 1 SKIP")

    def test_missing_file(self):
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(junit_summary.main(["/no/such/junit.xml"]), 1)


if __name__ == "__main__":
    unittest.main()
