"""cudalloc from Python: install it as PyTorch's CUDA allocator and read its statistics.

Pure Python over ctypes; nothing to compile. The library (libcudalloc.so) is found on first
use: $CUDALLOC_LIBRARY if set (and then only that path), else next to this package, else in
the build folder of a source checkout, else through the dynamic loader.

PyTorch can swap its CUDA allocator only before the allocator is initialised, that is before
the first CUDA tensor exists, so enable() belongs at the very top of a script::

    import cudalloc
    cudalloc.enable()                  # before any CUDA work

    import torch
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    del x, y
    print(cudalloc.memory_summary())   # torch.cuda.memory_summary() does not work with
    print(cudalloc.stats()["reserved_bytes"])  # pluggable allocators; these do

torch.cuda.empty_cache(), torch.cuda.set_per_process_memory_fraction() and
Tensor.record_stream() reach cudalloc through PyTorch's allocator hooks.

With the host tier (CUDALLOC_CONF=offload:host), offload() and prefetch() move a live
tensor's memory to host / device memory at the same address, and the tensor stays a CUDA
tensor throughout; no kernel may use it while the call runs::

    loss.backward()
    cudalloc.prefetch_optimizer_state(opt)   # back on the device for the update
    opt.step()
    cudalloc.offload_optimizer_state(opt)    # off the device for forward and backward
"""

import ctypes
import ctypes.util
import operator
import os
import threading

__all__ = [
    "CudallocError", "TooLateError", "enable", "is_enabled", "library_path", "stats",
    "stat_names", "empty_cache", "reset_peak_stats", "set_memory_fraction",
    "set_memory_limit", "validate", "version", "device_count", "memory_summary",
    "snapshot", "dump_snapshot", "offload", "prefetch", "promote", "residency",
    "offload_optimizer_state", "prefetch_optimizer_state",
]

LIBRARY_NAME = "libcudalloc.so"
MAX_STATS = 64  # CUDALLOC_MAX_STATS in cudalloc.h


class CudallocError(RuntimeError):
    """A cudalloc C API call failed. `code` is the cudalloc_error_t (cudaError_t) value."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class TooLateError(RuntimeError):
    """enable() ran after PyTorch had already initialised its own CUDA allocator."""


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
    "cudalloc_torch_init": (None, [_c.c_int]),
    "cudalloc_torch_reset": (None, []),
    "cudalloc_torch_memory_fraction": (None, [_c.c_double, _c.c_int]),
    "cudalloc_torch_record_stream": (None, [_c.c_void_p, _c.c_void_p]),
}
# PyTorch hook setter on alloc._allocator -> the C function it receives.
_TORCH_HOOKS = [
    ("set_init_fn", "cudalloc_torch_init"),
    ("set_reset_fn", "cudalloc_torch_reset"),
    ("set_memory_fraction_fn", "cudalloc_torch_memory_fraction"),
    ("set_record_stream_fn", "cudalloc_torch_record_stream"),
]

_lock = threading.RLock()
_state = {"lib": None, "path": None, "enabled": False, "names": None}


# ---- Loading --------------------------------------------------------------------------

def _candidates():
    """Yields (what, is_file) in the order to try; the loader is asked only if reached."""
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
        _declare(lib)
        return lib, what
    hint = ("CUDALLOC_LIBRARY is set, so nothing else was tried"
            if os.environ.get("CUDALLOC_LIBRARY")
            else "set CUDALLOC_LIBRARY to the path of libcudalloc.so")
    raise CudallocError("cannot load libcudalloc.so; tried:\n  " + "\n  ".join(tried)
                        + f"\n({hint})")


def _lib():
    with _lock:
        if _state["lib"] is None:
            _state["lib"], _state["path"] = _load()
        return _state["lib"]


def library_path():
    """The path (or loader name) libcudalloc.so was loaded from; loads it if needed."""
    _lib()
    return _state["path"]


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


# ---- PyTorch --------------------------------------------------------------------------

def _too_late_message(cause=""):
    return ("cudalloc.enable() ran after PyTorch had initialised its CUDA allocator"
            + (f" ({cause})" if cause else "") + ". The allocator can be swapped only before "
            "the first CUDA tensor is created: put\n    import cudalloc\n    cudalloc.enable()\n"
            "at the top of the script, before any CUDA work (model.cuda(), "
            "torch.empty(..., device='cuda'), ...).")


def _fn_address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def _set_hooks(alloc, lib):
    raw = alloc._allocator
    for setter, cname in _TORCH_HOOKS:
        if hasattr(raw, setter) and hasattr(lib, cname):
            getattr(raw, setter)(_fn_address(lib, cname))


def _install(torch, lib):
    memory = torch.cuda.memory
    alloc = memory.CUDAPluggableAllocator(_state["path"], "cudalloc_malloc", "cudalloc_free")
    _set_hooks(alloc, lib)
    try:
        memory.change_current_allocator(alloc)
    except RuntimeError as e:
        text = str(e)
        if "already initialized" in text or "Can't swap" in text:
            raise TooLateError(_too_late_message(text.strip().splitlines()[0])) from e
        raise
    return alloc


def enable(device_count=None):
    """Makes cudalloc PyTorch's CUDA allocator. Must run before the first CUDA tensor.

    device_count: if given, cudalloc_torch_init(device_count) is called right away; if not,
    PyTorch calls it through the init hook when it initialises CUDA.
    Raises TooLateError if PyTorch's allocator is already initialised. A second call is a
    no-op.
    """
    with _lock:
        if _state["enabled"]:
            return
        import torch  # imported here so the rest of the module works without torch
        if torch.cuda.is_initialized():
            raise TooLateError(_too_late_message("torch.cuda is already initialized"))
        lib = _lib()
        _state["torch_allocator"] = _install(torch, lib)  # keep the object alive
        if device_count is not None:
            lib.cudalloc_torch_init(int(device_count))
        _state["enabled"] = True


def is_enabled():
    """True once enable() has installed cudalloc into PyTorch in this process."""
    return _state["enabled"]


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
    import json
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


# ---- Host offload ---------------------------------------------------------------------
# Needs CUDALLOC_CONF=offload:host. Safety rule for offload() and prefetch(): no kernel may
# use the allocation (nor neighbours sharing its 2 MiB pages) while the call runs. Work
# already queued on `stream` or on the allocation's own stream is waited for; work on other
# streams that uses it must have finished. The tensor keeps its address and stays a CUDA
# tensor: kernels may use it after either call (on host memory, slower, but correct).

def _is_tensor(obj):
    return hasattr(obj, "untyped_storage") and hasattr(obj, "device")


def _pointer(obj):
    """The base of the allocation behind `obj`: a tensor's storage (not obj.data_ptr(), which
    is offset for views), or an int pointer as cudalloc handed it out."""
    if _is_tensor(obj):
        if not obj.is_cuda:
            raise ValueError(f"expected a CUDA tensor, got one on {obj.device}")
        return obj.untyped_storage().data_ptr()
    try:
        return operator.index(obj)
    except TypeError:
        raise TypeError(f"expected a CUDA tensor or an int pointer, got "
                        f"{type(obj).__name__}") from None


def _stream(stream, obj):
    """The cudaStream_t handle (int) for `stream`: None is the tensor device's current torch
    stream for a tensor, the legacy default stream (0) for a pointer; a torch.cuda.Stream (or
    anything with .cuda_stream) or an int handle is taken as it is."""
    if stream is None:
        if _is_tensor(obj):
            import torch
            return int(torch.cuda.current_stream(obj.device).cuda_stream)
        return 0
    try:
        return operator.index(getattr(stream, "cuda_stream", stream))
    except TypeError:
        raise TypeError(f"expected a torch.cuda.Stream, an int handle or None, got "
                        f"{type(stream).__name__}") from None


def offload(obj, stream=None):
    """Moves the allocation behind `obj` (a CUDA tensor, or a pointer cudalloc handed out) to
    host memory, keeping its address: the tensor stays a CUDA tensor, and every view of its
    storage moves with it. The move is ordered after the work already queued on `stream`
    (None: the tensor device's current stream; 0 for a pointer), and the call returns when it
    is done. No kernel may use the tensor while the call runs (work on other streams that uses
    it must have finished). An allocation smaller than a page (2 MiB) shares its pages with
    neighbours, which move with it under the same rule. Needs CUDALLOC_CONF=offload:host
    (and paged memory, the default vmm:1)."""
    ptr = _pointer(obj)
    _check(_function("cudalloc_offload")(ptr, _stream(stream, obj)), "cudalloc_offload")


def prefetch(obj, stream=None):
    """Moves the allocation behind `obj` back to device memory, keeping its address. Same
    rules as offload(): ordered after the work already queued on `stream`, returns when the
    move is done, and no kernel may use the tensor during the call. residency() tells where
    it lies."""
    ptr = _pointer(obj)
    _check(_function("cudalloc_prefetch")(ptr, _stream(stream, obj)), "cudalloc_prefetch")


def promote(device=-1):
    """Moves spilled and offloaded allocations of `device` (-1: all devices) back to device
    memory as far as the budget allows. The same rule holds for every allocation it moves: no
    kernel may use them during the call."""
    _check(_function("cudalloc_promote")(int(device)), "cudalloc_promote")


def residency(obj):
    """{"device_bytes", "host_bytes"}: how much of the allocation behind `obj` (a CUDA tensor
    or a pointer cudalloc handed out) lies in device and in host memory."""
    dev, host = ctypes.c_size_t(0), ctypes.c_size_t(0)
    code = _function("cudalloc_residency")(_pointer(obj), ctypes.byref(dev), ctypes.byref(host))
    _check(code, "cudalloc_residency")
    return {"device_bytes": dev.value, "host_bytes": host.value}


def _optimizer_storages(optimizer, min_bytes):
    """[(tensor, nbytes)] of the optimizer's CUDA state, one per allocation."""
    import torch
    seen, out = set(), []
    for state in optimizer.state.values():
        for value in state.values():
            if not (torch.is_tensor(value) and value.is_cuda):
                continue
            storage = value.untyped_storage()
            key = (value.device, storage.data_ptr())
            if storage.data_ptr() == 0 or storage.nbytes() < min_bytes or key in seen:
                continue
            seen.add(key)
            out.append((value, storage.nbytes()))
    return out


def offload_optimizer_state(optimizer, stream=None, min_bytes=2 << 20):
    """offload() on every CUDA tensor in optimizer.state (AdamW: exp_avg, exp_avg_sq) of at
    least `min_bytes` (default 2 MiB, one page: smaller ones would move the neighbours that
    share their pages, and save little).
    Call it after optimizer.step(); no kernel may use the state during the call. Returns the
    bytes of the allocations visited."""
    items = _optimizer_storages(optimizer, min_bytes)
    for tensor, _ in items:
        offload(tensor, stream)
    return sum(n for _, n in items)


def prefetch_optimizer_state(optimizer, stream=None, min_bytes=2 << 20):
    """prefetch() on the tensors offload_optimizer_state() moves; call it before
    optimizer.step() (after backward). Returns the bytes of the allocations visited."""
    items = _optimizer_storages(optimizer, min_bytes)
    for tensor, _ in items:
        prefetch(tensor, stream)
    return sum(n for _, n in items)


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


# ---- memory_summary -------------------------------------------------------------------

# Labels only: rows come from whatever names the library reports, unknown ones under "Other".
_GAUGE_LABELS = {
    "allocated_bytes": "Allocated memory",
    "active_bytes": "Active memory",
    "requested_bytes": "Requested memory",
    "reserved_bytes": "GPU reserved memory",
    "cached_bytes": "Cached free memory",
    "slab_bytes": "Small-size slab memory",
    "mapped_bytes": "Mapped page memory",
    "host_reserved_bytes": "Host reserved memory",
    "host_active_bytes": "Host active memory",
    "allocated_count": "Allocations",
    "active_count": "Active allocs",
    "reserved_count": "GPU reserved segments",
    "cached_count": "Cached free blocks",
    "slab_count": "Slabs",
}
_EVENT_LABELS = {
    "ooms": "OOMs",
    "alloc_retries": "Alloc retries",
    "cache_hits": "Cache hits",
    "device_allocs": "Device allocs",
    "device_frees": "Device frees",
    "stream_steals": "Stream steals",
    "pending_frees": "Pending frees",
    "page_maps": "Page maps",
    "page_unmaps": "Page unmaps",
    "page_waits": "Page waits",
    "spills": "Spills",
    "page_offloads": "Page offloads",
    "page_prefetches": "Page prefetches",
}
_COLUMNS = ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"]
_CELL = 13
_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def _format_bytes(n):
    value, unit = float(abs(n)), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    sign = "-" if n < 0 else ""
    number = f"{sign}{int(abs(n))}" if unit == 0 else f"{sign}{value:.2f}"
    return f"{number} {_UNITS[unit]:<3}"


def _format_count(n):
    return f"{n}    "  # the spaces line the digits up with those of byte rows


def _cells(stat, is_bytes):
    fmt = _format_bytes if is_bytes else _format_count
    freed = max(0, stat["total"] - stat["current"])
    values = [stat["current"], stat["peak"], stat["total"], freed]
    return [f" {fmt(v):>{_CELL - 2}} " for v in values]


def _label_width(names):
    labels = [_GAUGE_LABELS.get(n, n) for n in names] + ["Small-size slab memory"]
    return max(len(s) for s in labels) + 2  # the usual rows keep one width


class _Table:
    def __init__(self, label_width):
        self.lw = label_width
        self.width = label_width + len(_COLUMNS) * (_CELL + 1)
        self.lines = []

    def rule(self, ch):
        self.lines.append("|" + ch * self.width + "|")

    def text(self, s, align="^"):
        self.lines.append("|" + f"{s:{align}{self.width}}" + "|")

    def row(self, label, cells):
        self.lines.append("|" + f" {label:<{self.lw - 1}}" + "|" + "|".join(cells) + "|")

    def pairs(self, items):
        """items: (label, value) shown two per line, "label: value"."""
        half = (self.width - 1) // 2
        lw = max(len(k) for k, _ in items)
        texts = [f"{k:>{lw}}: {v}" for k, v in items]
        for i in range(0, len(texts), 2):
            left = f"  {texts[i]:<{half - 2}}"
            right = f"  {texts[i + 1] if i + 1 < len(texts) else '':<{self.width - half - 3}}"
            self.lines.append("|" + left + "|" + right + "|")


def _gauge_section(table, data, names, bytes_rows):
    rows = [n for n in names if n in data and n.endswith("_bytes") == bytes_rows]
    for name in rows:
        table.row(_GAUGE_LABELS[name], _cells(data[name], bytes_rows))
    if rows:
        table.rule("-")


def memory_summary(device=-1):
    """A text table of cudalloc's statistics, laid out like torch.cuda.memory_summary()."""
    dev, data = _read_stats(device)
    gauges = [n for n in _GAUGE_LABELS if n in data]
    events = [n for n in _EVENT_LABELS if n in data]
    others = [n for n in data if n not in _GAUGE_LABELS and n not in _EVENT_LABELS]
    table = _Table(_label_width(gauges + others))
    table.rule("=")
    table.text(f"cudalloc CUDA memory summary, device ID {dev}")
    if events:
        table.rule("-")
        table.pairs([(_EVENT_LABELS[n], data[n]["total"]) for n in events])
    table.rule("=")
    table.row(f"{'Metric':^{table.lw - 2}}", [f"{c:^{_CELL}}" for c in _COLUMNS])
    table.rule("-")
    _gauge_section(table, data, gauges, True)
    _gauge_section(table, data, gauges, False)
    if others:
        table.text(" Other statistics", "<")
        table.rule("-")
        for name in others:
            table.row(name, _cells(data[name], name.endswith("_bytes")))
        table.rule("-")
    table.lines[-1] = table.lines[-1].replace("-", "=")
    return "\n".join(table.lines) + "\n"
