"""The C API of libcudalloc.so over ctypes: loading the library, the mirror of cudalloc.h,
errors, and the calls that need no torch (control, statistics, snapshots)."""

import ctypes
import ctypes.util
import json
import os
import threading

LIBRARY_NAME = "libcudalloc.so"
PRELOAD_NAME = "libcudalloc_preload.so"
CLI_NAMES = ("cudalloc-cli", "cudalloc")  # in this package, in a build folder
MAX_STATS = 64  # CUDALLOC_MAX_STATS in cudalloc.h
# The C API this module speaks: a library of the same major and minor version, or a later
# patch (cudalloc_version() = MAJOR * 10000 + MINOR * 100 + PATCH). Within 0.x a new minor
# version may change the ABI.
API_VERSION = (0, 1)


class CudallocError(RuntimeError):
    """A cudalloc C API call failed. `code` is the cudalloc_error_t (cudaError_t) value."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


# ---- C API mirror ---------------------------------------------------------------------

class _Stat(ctypes.Structure):
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64),
                ("total", ctypes.c_int64)]


class _Stats(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int32), ("device", ctypes.c_int32),
                ("values", _Stat * MAX_STATS)]


_c = ctypes
_SIGNATURES = {  # name: (restype, argtypes); cudalloc_error_t is an int-sized enum
    "cudalloc_version": (_c.c_int, []),
    "cudalloc_version_string": (_c.c_char_p, []),
    "cudalloc_last_error_string": (_c.c_char_p, []),
    "cudalloc_error_name": (_c.c_char_p, [_c.c_int]),
    "cudalloc_empty_cache": (_c.c_int, [_c.c_int]),
    "cudalloc_set_memory_fraction": (_c.c_int, [_c.c_double, _c.c_int]),
    "cudalloc_set_memory_limit": (_c.c_int, [_c.c_size_t, _c.c_int]),
    "cudalloc_stat_count": (_c.c_int, []),
    "cudalloc_stat_name": (_c.c_char_p, [_c.c_int]),
    "cudalloc_stat_torch_name": (_c.c_char_p, [_c.c_int, _c.POINTER(_c.c_int)]),
    "cudalloc_get_stats": (_c.c_int, [_c.c_int, _c.POINTER(_Stats)]),
    "cudalloc_reset_peak_stats": (_c.c_int, [_c.c_int]),
    "cudalloc_device_count": (_c.c_int, []),
    "cudalloc_validate": (_c.c_int, [_c.c_int]),
    "cudalloc_snapshot": (_c.c_int, [_c.c_char_p]),
    "cudalloc_snapshot_json": (_c.c_int, [_c.c_char_p, _c.c_size_t, _c.POINTER(_c.c_size_t)]),
    "cudalloc_offload": (_c.c_int, [_c.c_void_p, _c.c_void_p]),
    "cudalloc_prefetch": (_c.c_int, [_c.c_void_p, _c.c_void_p]),
    "cudalloc_promote": (_c.c_int, [_c.c_int]),
    "cudalloc_residency": (_c.c_int, [_c.c_void_p, _c.POINTER(_c.c_size_t),
                                      _c.POINTER(_c.c_size_t)]),
    "cudalloc_region_begin": (_c.c_int, [_c.c_char_p]),
    "cudalloc_region_end": (_c.c_int, []),
    "cudalloc_pause": (_c.c_int, [_c.c_char_p, _c.c_int]),
    "cudalloc_resume": (_c.c_int, [_c.c_char_p]),
    "cudalloc_prepare_pause": (_c.c_int, [_c.c_char_p]),
    "cudalloc_region_residency": (_c.c_int, [_c.c_char_p, _c.POINTER(_c.c_size_t),
                                             _c.POINTER(_c.c_size_t)]),
    "cudalloc_region_paused": (_c.c_int, [_c.c_char_p, _c.POINTER(_c.c_int)]),
    "cudalloc_torch_init": (None, [_c.c_int]),
    "cudalloc_torch_reset": (None, []),
    "cudalloc_torch_memory_fraction": (None, [_c.c_double, _c.c_int]),
    "cudalloc_torch_record_stream": (None, [_c.c_void_p, _c.c_void_p]),
}

_lock = threading.RLock()  # guards _state; torch.py takes it for enable() too
_state = {"lib": None, "path": None, "names": None}


# ---- Loading --------------------------------------------------------------------------

def _preloaded():
    """The path of libcudalloc_preload.so when this process runs under it (LD_PRELOAD): its C
    API is the allocator that serves the program, so the module must speak to that one."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path) == PRELOAD_NAME:
                    return path
    except OSError:
        pass
    return None


def _candidates():
    """Yields (what, is_file) in the order to try; the loader is asked only if reached."""
    preloaded = _preloaded()  # first: any other copy would be a second, idle allocator
    if preloaded:
        yield preloaded, True
        return
    env = os.environ.get("CUDALLOC_LIBRARY")
    if env:
        yield env, True
        return
    pkg = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(pkg, LIBRARY_NAME), True
    for up in (["..", ".."], ["..", "..", ".."]):  # tools/build, then the checkout's build
        yield os.path.normpath(os.path.join(pkg, *up, "build", LIBRARY_NAME)), True
    found = ctypes.util.find_library("cudalloc")
    if found and found != LIBRARY_NAME:
        yield found, False
    yield LIBRARY_NAME, False


def _declare(lib):
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name, None)  # a missing symbol fails when it is used
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes


def _load():
    tried = []
    for what, is_file in _candidates():
        if is_file and not os.path.isfile(what):
            tried.append(f"{what} (no such file)")
            continue
        if is_file:
            what = os.path.abspath(what)  # torch must load the very same file
        try:
            lib = ctypes.CDLL(what)
        except OSError as e:
            tried.append(f"{what} ({e})")
            continue
        _check_version(lib, what)
        _declare(lib)
        return lib, what
    hint = ("CUDALLOC_LIBRARY is set, so nothing else was tried"
            if os.environ.get("CUDALLOC_LIBRARY")
            else "set CUDALLOC_LIBRARY to the path of libcudalloc.so")
    raise CudallocError("cannot load libcudalloc.so; tried:\n  " + "\n  ".join(tried)
                        + f"\n({hint})")


def _check_version(lib, path):
    try:
        lib.cudalloc_version.restype = ctypes.c_int
        version = int(lib.cudalloc_version())
    except AttributeError:
        raise CudallocError(f"{path} has no cudalloc_version(): not a cudalloc library") from None
    major, minor = version // 10000, version // 100 % 100
    if (major, minor) != API_VERSION:
        raise CudallocError(
            f"{path} is cudalloc {major}.{minor}.{version % 100}, but this Python module "
            f"speaks the C API of {API_VERSION[0]}.{API_VERSION[1]}: install the module and "
            "the library from the same build (pip install . builds both)")


def _lib():
    with _lock:
        if _state["lib"] is None:
            _state["lib"], _state["path"] = _load()
        return _state["lib"]


def library_path():
    """The path (or loader name) libcudalloc.so was loaded from; loads it if needed."""
    _lib()
    return _state["path"]


def _beside_library(names, what):
    """The first of `names` in this package, beside the loaded library, or in the checkout's
    build folder."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    places = [pkg, os.path.dirname(os.path.abspath(library_path()))]
    places += [os.path.normpath(os.path.join(pkg, *up, "build"))
               for up in (["..", ".."], ["..", "..", ".."])]
    for place in places:
        for name in names:
            path = os.path.join(place, name)
            if os.path.isfile(path):
                return path
    raise CudallocError(f"no {what} ({' or '.join(names)}) in " + ", ".join(places))


def preload_path():
    """The path of libcudalloc_preload.so, for LD_PRELOAD."""
    return _beside_library([PRELOAD_NAME], "preload library")


def cli_path():
    """The path of the cudalloc command-line tool's binary."""
    return _beside_library(list(CLI_NAMES), "cudalloc CLI")


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def _function(name):
    """The C function `name`, or CudallocError naming the library that lacks it."""
    fn = getattr(_lib(), name, None)
    if fn is None:
        raise CudallocError(f"{_state['path']} has no {name} (a build older than this "
                            "module?)")
    return fn


def _check(code, what):
    if code == 0:
        return
    lib = _lib()
    detail = _text(lib.cudalloc_last_error_string())  # read first: later calls may reset it
    name = _text(lib.cudalloc_error_name(code)) or "error"
    raise CudallocError(f"{what}: {name} ({code})" + (f": {detail}" if detail else ""), code)


# ---- Control --------------------------------------------------------------------------

def empty_cache(device=-1):
    """Returns cached, unused segments of `device` (-1: all devices) to the driver."""
    _check(_lib().cudalloc_empty_cache(int(device)), "cudalloc_empty_cache")


def reset_peak_stats(device=-1):
    """Resets the peak of every statistic of `device` (-1: current) to its current value."""
    _check(_lib().cudalloc_reset_peak_stats(int(device)), "cudalloc_reset_peak_stats")


def set_memory_fraction(fraction, device=-1):
    """Caps what cudalloc reserves on `device` at fraction * total device memory."""
    code = _lib().cudalloc_set_memory_fraction(float(fraction), int(device))
    _check(code, "cudalloc_set_memory_fraction")


def set_memory_limit(nbytes, device=-1):
    """Caps what cudalloc reserves on `device` at `nbytes` bytes (0: no cap)."""
    if int(nbytes) < 0:
        raise ValueError(f"memory limit must be >= 0, got {nbytes}")
    _check(_lib().cudalloc_set_memory_limit(int(nbytes), int(device)),
           "cudalloc_set_memory_limit")


def validate(device=-1):
    """Checks cudalloc's internal invariants; raises CudallocError on the first violation."""
    _check(_lib().cudalloc_validate(int(device)), "cudalloc_validate")


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _text(_lib().cudalloc_version_string())


def device_count():
    """Number of devices cudalloc sees (0 without a driver)."""
    return int(_lib().cudalloc_device_count())


# ---- Snapshots ------------------------------------------------------------------------

def snapshot():
    """The allocator's state as a dict in PyTorch's memory-snapshot schema (segments,
    device_traces, allocator_settings) plus a "cudalloc" section with stats and slabs.
    device_traces is filled when CUDALLOC_CONF has trace:N."""
    lib = _lib()
    for _ in range(4):  # the state may grow between sizing and copying: retry
        length = ctypes.c_size_t(0)
        lib.cudalloc_snapshot_json(None, 0, ctypes.byref(length))
        buffer = ctypes.create_string_buffer(length.value + 4096)
        code = lib.cudalloc_snapshot_json(buffer, len(buffer), ctypes.byref(length))
        if code == 0:
            return json.loads(buffer.value.decode("utf-8"))
    _check(code, "cudalloc_snapshot_json")
    return None


def dump_snapshot(path):
    """Writes snapshot() as JSON to `path` ("%p" becomes the process id). View it with
    `cudalloc inspect PATH`, or convert it for PyTorch's tools with
    `cudalloc convert PATH -o out.pickle`."""
    _check(_lib().cudalloc_snapshot(os.fsencode(path)), "cudalloc_snapshot")


# ---- Statistics -----------------------------------------------------------------------

def stat_names():
    """Names of the statistics, in the library's order (from cudalloc_stat_name)."""
    with _lock:
        if _state["names"] is None:
            lib = _lib()
            count = int(lib.cudalloc_stat_count())
            _state["names"] = [_text(lib.cudalloc_stat_name(i)) or f"stat_{i}"
                               for i in range(count)]
        return list(_state["names"])


def _read_stats(device):
    out = _Stats()
    _check(_lib().cudalloc_get_stats(int(device), ctypes.byref(out)), "cudalloc_get_stats")
    names = stat_names()
    result = {}
    for i in range(max(0, min(int(out.count), MAX_STATS))):
        name = names[i] if i < len(names) else f"stat_{i}"
        v = out.values[i]
        result[name] = {"current": v.current, "peak": v.peak, "total": v.total}
    return int(out.device), result


def stats(device=-1):
    """{name: {"current", "peak", "total"}} for `device` (-1: the current device)."""
    return _read_stats(device)[1]


def torch_memory_stats(device=-1):
    """cudalloc's statistics as torch.cuda.memory_stats_as_nested_dict() gives PyTorch's:
    {"allocated_bytes": {"all": {"current", "peak", "allocated", "freed"}, "large_pool":
    ..., "small_pool": ...}, "num_ooms": n, ...}, under the names of cudalloc_stat_torch_name
    (the same mapping the PyTorch adapter uses). cudalloc has no small pool: its figures are
    all under "all" and "large_pool"."""
    lib = _lib()
    values = _read_stats(device)[1]
    names = stat_names()
    zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    out = {"max_split_size": -1, "oversize_allocations": dict(zero),
           "oversize_segments": dict(zero)}
    for i, name in enumerate(names):
        gauge = ctypes.c_int(0)
        torch_name = _text(lib.cudalloc_stat_torch_name(i, ctypes.byref(gauge)))
        if not torch_name or name not in values:
            continue
        v = values[name]
        if gauge.value:
            stat = {"current": v["current"], "peak": v["peak"], "allocated": v["total"],
                    "freed": v["total"] - v["current"]}
            out[torch_name] = {"all": stat, "large_pool": dict(stat), "small_pool": dict(zero)}
        else:
            out[torch_name] = v["total"]
    return out
