"""The parent/child protocol of the PyTorch benchmarks, examples and GPU tests.

PyTorch can choose its CUDA allocator only once per process, before CUDA is used, so every
script that compares allocators runs itself again in fresh child processes. The protocol:

  child   does its work, then prints one line `RESULT <json>` on stdout (print_result());
          anything else it prints is log output;
  parent  runs the child with a timeout (run_child()), echoes the child's other stdout lines
          under a prefix, and takes the result from the RESULT line. A child that timed out,
          exited non-zero or printed no RESULT line has failed (ChildRun.failure()).

Also here: the environment of a child (child_env(): changes applied, tools/python on
PYTHONPATH), the settings for deterministic kernels (DETERMINISTIC_ENV, make_deterministic())
and the import of the cudalloc module from the source tree (import_cudalloc()).
Pure standard library: the parent side works without torch.
"""
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, "..", "python"))
RESULT_TAG = "RESULT "
SKIP = 77  # the exit status meaning "skipped" (CTest: SKIP_RETURN_CODE 77)
# cuBLAS needs a fixed workspace for deterministic results; set before CUDA starts.
DETERMINISTIC_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


# ---- Child side -----------------------------------------------------------------------

def import_cudalloc():
    """The cudalloc module: the installed one, else the one of this source tree."""
    try:
        import cudalloc
    except ImportError:
        sys.path.insert(0, PYTHON_DIR)
        import cudalloc
    return cudalloc


def make_deterministic(torch, strict=False):
    """Deterministic kernels. Not strict: ops without a deterministic kernel stay as they are
    (a warning). Strict: such ops raise, and TF32 is off too."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if strict:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=not strict)


def print_result(result):
    """Prints the child's RESULT line, after flushing what was printed before it (the parent
    reads one stream; buffered output must not land after the result)."""
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(result), flush=True)


# ---- Parent side ----------------------------------------------------------------------

def cuda_device_count():
    """CUDA devices the driver shows this process (0 without a driver or a GPU). Asks
    libcuda directly, so it needs no torch and does not initialise torch's CUDA state."""
    import ctypes
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def skip_reason(modules=("torch",), gpus=1):
    """Why a check cannot run on this machine (a module in `modules` is not installed, or
    fewer than `gpus` CUDA devices), or None when it can."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if gpus > 0:
        count = cuda_device_count()
        if count < gpus:
            return f"{count} GPU(s), {gpus} needed"
    return None


def child_env(changes=None, base=None):
    """A copy of `base` (default os.environ) with `changes` ({name: value, or None to remove
    it}) applied and this tree's tools/python first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PYTHONPATH"] = os.pathsep.join(p for p in [PYTHON_DIR, env.get("PYTHONPATH")] if p)
    return env


def describe(changes, cmd):
    """The child's command as a shell line (PYTHONPATH, always extended, left out)."""
    unset = [f"-u {k}" for k, v in changes.items() if v is None]
    assign = [f"{k}={shlex.quote(v)}" for k, v in changes.items() if v is not None]
    return " ".join((["env"] + unset if unset else []) + assign + [shlex.join(cmd)])


def _text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


@dataclass
class ChildRun:
    """What a child left: its result (None: no RESULT line), its exit status (None: killed
    after `timeout` seconds), its stdout and, when captured, its stderr."""
    result: object
    returncode: object
    stdout: str = ""
    stderr: str = ""
    timeout: object = None

    def failure(self):
        """Why the child failed, or None when it exited 0 with a RESULT line."""
        if self.returncode is None:
            return f"timed out after {self.timeout:g} s"
        if self.result is None or self.returncode != 0:
            present = "present" if self.result is not None else "missing"
            return f"exit status {self.returncode}, result line {present}"
        return None

    def checked_result(self):
        """The result, or on failure the result so far (or {}) with status "failed" and the
        reason as message."""
        why = self.failure()
        if why is None:
            return self.result
        return dict(self.result or {}, status="failed", message=why)

    def tail(self, lines):
        """The last `lines` lines of stderr (of stdout when stderr is empty)."""
        return (self.stderr or self.stdout).strip().splitlines()[-lines:]


def parse_output(out, echo_prefix=None):
    """The result of the last RESULT line of `out` (None if none); with `echo_prefix`, every
    other non-blank line is printed under it."""
    result = None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG):])
        elif echo_prefix is not None and line.strip():
            print(f"{echo_prefix}{line}", flush=True)
    return result


def run_child(cmd, env=None, timeout=None, echo_prefix=None, capture_stderr=False):
    """Runs `cmd` (stderr passes through unless captured), killing it after `timeout`
    seconds; returns a ChildRun. A malformed RESULT line raises ValueError: it is a bug of
    the script, not a failure of the child."""
    stderr = subprocess.PIPE if capture_stderr else None
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                              timeout=timeout)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, err, code = _text(e.stdout), _text(e.stderr), None
    return ChildRun(parse_output(out, echo_prefix), code, out, err or "", timeout)


def script_command(script, *args):
    """[python, script, args...]: the same interpreter runs the child."""
    return [sys.executable, os.path.abspath(script)] + [str(a) for a in args]
