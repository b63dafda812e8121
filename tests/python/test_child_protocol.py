#!/usr/bin/env python3
"""The parent/child protocol of tools/bench/child.py and the command lines of the scripts that
use it, without torch or a GPU (plain unittest; CTest runs it as python.child_protocol).

    python3 tests/python/test_child_protocol.py [-v]
"""
import contextlib
import io
import os
import py_compile
import runpy
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BENCH_DIR = os.path.join(ROOT, "tools", "bench")
sys.path.insert(0, BENCH_DIR)
import child  # noqa: E402
import workloads  # noqa: E402

# Every script built on the protocol, with arguments that reach its skip check.
SCRIPTS = {
    "tools/bench/torch_workloads.py": [],
    "tools/bench/torch_empty_bench.py": [],
    "examples/offload/adamw_offload.py": [],
    "examples/multi_gpu/two_devices.py": [],
    "examples/multi_gpu/ddp_gpt2.py": [],
    "tests/python/test_torch_train.py": [],
    "tests/python/preload_frameworks.py": ["libcudalloc_preload.so"],
}


def write_child(directory, body):
    """A child script in `directory` that can import child.py; returns its path."""
    path = os.path.join(directory, "fake_child.py")
    with open(path, "w") as f:
        f.write(f"import sys, time\nsys.path.insert(0, {BENCH_DIR!r})\nimport child\n")
        f.write(textwrap.dedent(body))
    return path


def load_script(relative):
    """The module of a script (its __main__ block not run)."""
    return types.SimpleNamespace(**runpy.run_path(os.path.join(ROOT, relative)))


class ParseOutputTest(unittest.TestCase):
    def test_result_line_is_parsed_and_other_lines_echoed(self):
        out = 'log one\n\nRESULT {"a": 1}\nlog two\n'
        echoed = io.StringIO()
        with contextlib.redirect_stdout(echoed):
            result = child.parse_output(out, echo_prefix="  [x] ")
        self.assertEqual(result, {"a": 1})
        self.assertEqual(echoed.getvalue(), "  [x] log one\n  [x] log two\n")

    def test_last_result_line_wins_and_nothing_is_echoed_without_prefix(self):
        echoed = io.StringIO()
        with contextlib.redirect_stdout(echoed):
            result = child.parse_output('RESULT {"n": 1}\nnoise\nRESULT {"n": 2}\n')
        self.assertEqual(result, {"n": 2})
        self.assertEqual(echoed.getvalue(), "")

    def test_no_result_line(self):
        self.assertIsNone(child.parse_output("RESULT\nresult {}\n RESULT {}\n"))

    def test_malformed_result_line_raises(self):
        with self.assertRaises(ValueError):
            child.parse_output("RESULT {not json\n")


class RunChildTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_fake(self, body, **kwargs):
        cmd = child.script_command(write_child(self.dir.name, body))
        with contextlib.redirect_stdout(io.StringIO()) as echoed:
            run = child.run_child(cmd, **kwargs)
        return run, echoed.getvalue()

    def test_success(self):
        run, echoed = self.run_fake("""
            print("working")
            child.print_result({"status": "ok", "values": [1.5]})
        """, echo_prefix="[c] ")
        self.assertEqual(run.returncode, 0)
        self.assertIsNone(run.failure())
        self.assertEqual(run.checked_result(), {"status": "ok", "values": [1.5]})
        self.assertEqual(echoed, "[c] working\n")

    def test_non_zero_exit_with_result(self):
        run, _ = self.run_fake("""
            child.print_result({"status": "ok", "x": 1})
            sys.exit(3)
        """)
        self.assertEqual(run.failure(), "exit status 3, result line present")
        self.assertEqual(run.checked_result(), {"status": "failed", "x": 1,
                                                "message": "exit status 3, result line present"})

    def test_exit_zero_without_result(self):
        run, _ = self.run_fake("print('no result')\n")
        self.assertEqual(run.failure(), "exit status 0, result line missing")
        self.assertEqual(run.checked_result(), {"status": "failed",
                                                "message": "exit status 0, result line missing"})

    def test_timeout_keeps_the_output_so_far(self):
        run, _ = self.run_fake("""
            child.print_result({"partial": True})
            time.sleep(60)
        """, timeout=2)
        self.assertIsNone(run.returncode)
        self.assertEqual(run.result, {"partial": True})
        self.assertEqual(run.failure(), "timed out after 2 s")
        self.assertEqual(run.checked_result()["status"], "failed")

    def test_captured_stderr_and_its_tail(self):
        run, _ = self.run_fake("""
            for i in range(5):
                print(f"err {i}", file=sys.stderr)
            sys.exit(1)
        """, capture_stderr=True)
        self.assertEqual(run.tail(2), ["err 3", "err 4"])
        self.assertEqual(run.returncode, 1)

    def test_tail_falls_back_to_stdout(self):
        run, _ = self.run_fake("print('a'); print('b'); sys.exit(1)\n", capture_stderr=True)
        self.assertEqual(run.tail(1), ["b"])

    def test_environment_reaches_the_child(self):
        env = child.child_env({"FAKE_CHILD_VALUE": "42"})
        run, _ = self.run_fake("""
            import os
            child.print_result({"value": os.environ.get("FAKE_CHILD_VALUE"),
                                "path": os.environ["PYTHONPATH"]})
        """, env=env)
        self.assertEqual(run.result["value"], "42")
        self.assertEqual(run.result["path"].split(os.pathsep)[0], child.PYTHON_DIR)


class EnvironmentTest(unittest.TestCase):
    def test_changes_set_and_remove_and_base_is_untouched(self):
        base = {"KEEP": "1", "DROP": "2", "PYTHONPATH": "/elsewhere"}
        env = child.child_env({"DROP": None, "NEW": "3", "ABSENT": None}, base=base)
        self.assertEqual(env["KEEP"], "1")
        self.assertEqual(env["NEW"], "3")
        self.assertNotIn("DROP", env)
        self.assertEqual(env["PYTHONPATH"], os.pathsep.join([child.PYTHON_DIR, "/elsewhere"]))
        self.assertEqual(base, {"KEEP": "1", "DROP": "2", "PYTHONPATH": "/elsewhere"})

    def test_pythonpath_without_a_previous_one(self):
        self.assertEqual(child.child_env(base={})["PYTHONPATH"], child.PYTHON_DIR)

    def test_describe(self):
        line = child.describe({"A": None, "B": "x y"}, ["python3", "s.py", "--n", "1"])
        self.assertEqual(line, "env -u A B='x y' python3 s.py --n 1")
        self.assertEqual(child.describe({}, ["p"]), "p")

    def test_deterministic_env(self):
        self.assertEqual(child.DETERMINISTIC_ENV, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})


class FakeTorch:
    """The attributes make_deterministic() sets, recorded."""

    def __init__(self):
        ns = types.SimpleNamespace
        self.backends = ns(cudnn=ns(deterministic=False, benchmark=True, allow_tf32=True),
                           cuda=ns(matmul=ns(allow_tf32=True)))
        self.algorithms = None

    def use_deterministic_algorithms(self, mode, warn_only=False):
        self.algorithms = (mode, warn_only)


class ChildSideTest(unittest.TestCase):
    def test_make_deterministic(self):
        torch = FakeTorch()
        child.make_deterministic(torch)
        self.assertTrue(torch.backends.cudnn.deterministic)
        self.assertFalse(torch.backends.cudnn.benchmark)
        self.assertEqual(torch.algorithms, (True, True))
        self.assertTrue(torch.backends.cuda.matmul.allow_tf32)

    def test_make_deterministic_strict(self):
        torch = FakeTorch()
        child.make_deterministic(torch, strict=True)
        self.assertEqual(torch.algorithms, (True, False))
        self.assertFalse(torch.backends.cuda.matmul.allow_tf32)
        self.assertFalse(torch.backends.cudnn.allow_tf32)

    def test_import_cudalloc_from_the_tree(self):
        module = child.import_cudalloc()
        self.assertTrue(hasattr(module, "enable"))
        self.assertTrue(hasattr(module, "stats"))

    def test_skip_reason(self):
        self.assertEqual(child.skip_reason(("no_such_module_xyz",)),
                         "no_such_module_xyz not installed")
        self.assertIsNone(child.skip_reason(("json",), gpus=0))
        count = child.cuda_device_count()
        self.assertGreaterEqual(count, 0)
        self.assertEqual(child.skip_reason((), gpus=count + 1),
                         f"{count} GPU(s), {count + 1} needed")

    def test_script_command(self):
        self.assertEqual(child.script_command("a.py", "--n", 3),
                         [sys.executable, os.path.abspath("a.py"), "--n", "3"])


class WorkloadsTest(unittest.TestCase):
    def test_table(self):
        for name, (builder, steps, modules, kind) in workloads.WORKLOADS.items():
            self.assertTrue(callable(builder), name)
            self.assertGreater(steps, 2, name)  # more than the warm-up steps
            self.assertIn(kind, ("loss", "checksum"), name)
            self.assertTrue(set(modules) <= {"transformers", "torchvision", "torch_geometric"},
                            name)
        self.assertTrue(set(workloads.MAIN_WORKLOADS) <= set(workloads.WORKLOADS))
        self.assertIs(workloads.WORKLOADS["gpt2_train"][0], workloads.Gpt2Train)

    def test_gpt2_small(self):
        self.assertEqual(workloads.GPT2_SMALL, {"n_layer": 12, "n_embd": 768, "n_head": 12,
                                                "n_positions": 1024})
        self.assertEqual(workloads.GPT2_BATCH, (8, 1024))


class ScriptsTest(unittest.TestCase):
    def test_every_script_compiles(self):
        paths = list(SCRIPTS) + ["tools/bench/child.py", "tools/bench/workloads.py"]
        paths += [os.path.join("tests/python", n) for n in os.listdir(os.path.join(
            ROOT, "tests", "python")) if n.endswith(".py")]
        for path in paths:
            with tempfile.TemporaryDirectory() as d:
                py_compile.compile(os.path.join(ROOT, path), cfile=os.path.join(d, "c.pyc"),
                                   doraise=True)

    def test_every_script_skips_without_torch(self):
        """With torch and the other frameworks hidden, each script, run as `python3 SCRIPT`
        (its folder first on sys.path), exits 77 and says why."""
        for path, args in SCRIPTS.items():
            code = ("import runpy, sys\n"
                    "for m in ('torch', 'transformers', 'cupy', 'jax'):\n"
                    "    sys.modules[m] = None\n"
                    f"sys.argv = [{path!r}] + {args!r}\n"
                    f"sys.path.insert(0, {os.path.dirname(os.path.join(ROOT, path))!r})\n"
                    f"runpy.run_path({os.path.join(ROOT, path)!r}, run_name='__main__')\n")
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  timeout=120)
            self.assertEqual(proc.returncode, 77, f"{path}: {proc.stdout}{proc.stderr}")
            self.assertIn("SKIP: ", proc.stdout, path)


class CommandLineTest(unittest.TestCase):
    def test_torch_workloads_arguments(self):
        tw = load_script("tools/bench/torch_workloads.py")
        args = tw.parse_args([])
        self.assertEqual(args.workloads, workloads.MAIN_WORKLOADS)
        self.assertEqual(args.modes, ["native", "expandable", "cudalloc"])
        self.assertEqual(args.child_timeout, 240)
        args = tw.parse_args(["--modes", "cudalloc,native", "--workloads", "gpt2_train",
                              "--limit-fraction", "0.6", "--deterministic", "--steps", "8"])
        self.assertEqual(args.modes, ["native", "cudalloc"])  # native first
        self.assertEqual(args.steps, 8)
        for bad in (["--steps", "2"], ["--workloads", "nope"], ["--modes", ""],
                    ["--repeat", "0"], ["--limit-fraction", "-1"]):
            with self.assertRaises(SystemExit, msg=bad), \
                    contextlib.redirect_stderr(io.StringIO()):
                tw.parse_args(bad)

    def test_torch_workloads_child_environment(self):
        tw = load_script("tools/bench/torch_workloads.py")
        args = tw.parse_args(["--conf", "limit:5G,vmm:1", "--deterministic"])
        self.assertEqual(tw.env_changes("cudalloc", args, limit=1000),
                         {"PYTORCH_CUDA_ALLOC_CONF": None, "CUDALLOC_CONF": "vmm:1,limit:1000",
                          "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
        self.assertEqual(tw.env_changes("expandable", tw.parse_args([])),
                         {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        cmd = tw.child_command("cudalloc", "gpt2_train", 8, args)
        self.assertEqual(cmd[2:], ["--child", "cudalloc", "--workloads", "gpt2_train",
                                   "--steps", "8", "--deterministic"])

    def test_torch_workloads_dry_run(self):
        tw = load_script("tools/bench/torch_workloads.py")
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = tw.main(["--dry-run", "--workloads", "gpt2_train", "--modes", "native"])
        self.assertEqual(code, 0)
        self.assertIn("# gpt2_train round 1 native", out.getvalue())
        self.assertIn("env -u PYTORCH_CUDA_ALLOC_CONF", out.getvalue())

    def test_torch_workloads_values_diff(self):
        tw = load_script("tools/bench/torch_workloads.py")
        self.assertEqual(tw.values_diff([1.0, 2.0], [1.0, 2.0]),
                         {"max_rel": 0.0, "same_length": True, "compared": 2})
        self.assertIsNone(tw.values_diff([], [1.0]))

    def test_torch_workloads_totals_and_mean_maps(self):
        tw = load_script("tools/bench/torch_workloads.py")

        def run(mode, steps_ms, maps):
            return {"mode": mode, "status": "ok", "step_ms": steps_ms, "values": [1.0],
                    "peak_reserved": 1 << 30, "peak_allocated": 1 << 30,
                    "counter_deltas": [{"page_maps": m, "page_unmaps": 0} for m in maps]}

        row = tw.summarize_row({
            "native": run("native", [9.0, 9.0, 100.0, 200.0], [0] * 4),
            "expandable": run("expandable", [9.0, 9.0, 100.0, 300.0], [0] * 4),
            "cudalloc": run("cudalloc", [9.0, 9.0, 110.0, 220.0], [5, 0, 0, 0, 0, 12])})
        # The warm-up steps are left out; the mean shows a spike that the median hides.
        self.assertEqual(row["timed_total_ms"]["cudalloc"], 330.0)
        self.assertEqual(row["maps_unmaps_per_step"], 0)
        self.assertEqual(row["maps_unmaps_per_step_mean"], 4.0)
        table = tw.totals_table([("w", row)])
        self.assertIn("| w | 0.300 / 0.400 / 0.330 | +10.0% | -17.5% | 4.0 |", table)

    def test_adamw_offload_arguments_and_conf(self):
        ad = load_script("examples/offload/adamw_offload.py")
        args = ad.parse_args([])
        self.assertEqual((args.steps, args.child_timeout), (8, 300))
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            ad.parse_args(["--steps", "1"])
        self.assertEqual(ad.conf_for("plain", "offload:host,host_limit:1G,vmm:1"), "vmm:1")
        self.assertEqual(ad.conf_for("offload", "vmm:1"), "vmm:1,offload:host")

    def test_torch_empty_bench_arguments(self):
        te = load_script("tools/bench/torch_empty_bench.py")
        args = te.parse_args(["--iters", "5"])
        self.assertEqual((args.iters, args.runs, args.warmup), (5, 7, 2000))


if __name__ == "__main__":
    unittest.main()
