"""Installing cudalloc as PyTorch's CUDA allocator. torch is imported only inside enable(),
so the rest of the package works without it.

Two ways in, chosen by enable():
  adapter    libcudalloc_torch.so (tools/torch_adapter), PyTorch's CUDAAllocator interface
             compiled against the installed torch: stats, snapshots with stacks, CUDA graphs
             (private pools), MemPool, cacheInfo (cuDNN benchmark), the OOM type and its
             observers all work as with PyTorch's own allocator.
  pluggable  CUDAPluggableAllocator over the C API, when the adapter is not built for this
             torch: allocation, empty_cache, memory fraction, record_stream and the stats
             functions (PyTorch's pluggable wrapper raises for the rest). CUDA graphs get no
             pool calls: each capture's memory stays reserved until the process exits.
"""

import ctypes
import os

from ._capi import (CudallocError, _lib, _lock, library_path, reset_peak_stats,
                    torch_memory_stats)

ADAPTER_NAME = "libcudalloc_torch.so"


class TooLateError(RuntimeError):
    """enable() ran after PyTorch had already initialised its own CUDA allocator."""


# PyTorch hook setter on alloc._allocator -> the C function it receives.
_TORCH_HOOKS = [
    ("set_init_fn", "cudalloc_torch_init"),
    ("set_reset_fn", "cudalloc_torch_reset"),
    ("set_memory_fraction_fn", "cudalloc_torch_memory_fraction"),
    ("set_record_stream_fn", "cudalloc_torch_record_stream"),
]

_state = {"enabled": False, "torch_allocator": None, "mode": None, "adapter": None}


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
    alloc = memory.CUDAPluggableAllocator(library_path(), "cudalloc_malloc", "cudalloc_free")
    _set_hooks(alloc, lib)
    try:
        memory.change_current_allocator(alloc)
    except RuntimeError as e:
        text = str(e)
        if "already initialized" in text or "Can't swap" in text:
            raise TooLateError(_too_late_message(text.strip().splitlines()[0])) from e
        raise
    _answer_stats(torch)
    return alloc


def _answer_stats(torch):
    """PyTorch's pluggable wrapper raises for stats: on that path, torch.cuda's stats
    functions (memory_allocated, memory_stats, memory_summary, max_memory_*, ...) read
    cudalloc's figures instead, under PyTorch's key names (memory_stats() and everything
    built on it goes through memory_stats_as_nested_dict)."""
    memory = torch.cuda.memory

    def nested(device=None):
        if not torch.cuda.is_initialized():
            return {}
        index = torch.cuda._utils._get_device_index(device, optional=True)
        return torch_memory_stats(index)

    def reset_peaks(device=None):
        reset_peak_stats(torch.cuda._utils._get_device_index(device, optional=True))

    for module in (memory, torch.cuda):
        module.memory_stats_as_nested_dict = nested
        module.reset_peak_memory_stats = reset_peaks


def adapter_path():
    """The adapter library to use: $CUDALLOC_TORCH_ADAPTER if it names a file, else
    libcudalloc_torch.so beside libcudalloc.so; None when there is none."""
    env = os.environ.get("CUDALLOC_TORCH_ADAPTER", "")
    if env not in ("", "0", "1"):
        return env if os.path.isfile(env) else None
    path = os.path.join(os.path.dirname(os.path.abspath(library_path())), ADAPTER_NAME)
    return path if os.path.isfile(path) else None


def _install_adapter(torch, lib, path):
    # RTLD_LOCAL: nothing loaded later should bind to the adapter's symbols (it exports only
    # its two entry points, tools/torch_adapter/exports.map, and needs no global scope).
    adapter = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    version = adapter.cudalloc_torch_adapter_version()
    if version != lib.cudalloc_version():
        raise CudallocError(f"{path} was built for cudalloc C API {version}, but "
                            f"{library_path()} is {lib.cudalloc_version()}: rebuild them "
                            "together")
    message = ctypes.create_string_buffer(512)
    code = adapter.cudalloc_torch_install(message, len(message))
    text = message.value.decode("utf-8", "replace")
    if code == 1:
        raise TooLateError(_too_late_message(text))
    if code != 0:
        raise CudallocError(f"installing the PyTorch adapter {path} failed: {text}")
    return adapter


def _wants_adapter(adapter):
    if adapter is not None:
        return bool(adapter)
    return os.environ.get("CUDALLOC_TORCH_ADAPTER", "") != "0"


def enable(device_count=None, adapter=None):
    """Makes cudalloc PyTorch's CUDA allocator. Must run before the first CUDA tensor.

    adapter: None (default) uses the C++ adapter when it is built for this torch and falls
    back to the pluggable path otherwise; True requires the adapter; False takes the
    pluggable path. CUDALLOC_TORCH_ADAPTER=0 in the environment also takes the pluggable
    path, and =PATH names the adapter library.
    device_count: pluggable path only: if given, cudalloc_torch_init(device_count) is called
    right away; if not, PyTorch calls it through the init hook when it initialises CUDA.
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
        path = adapter_path() if _wants_adapter(adapter) else None
        if adapter and path is None:
            raise CudallocError(f"enable(adapter=True): no {ADAPTER_NAME} beside "
                                f"{library_path()} (build with -DCUDALLOC_TORCH_DIR=...)")
        if path is not None:
            _state["adapter"] = _install_adapter(torch, lib, path)
            _state["mode"] = "adapter"
        else:
            _state["torch_allocator"] = _install(torch, lib)  # keep the object alive
            _state["mode"] = "pluggable"
            if device_count is not None:
                lib.cudalloc_torch_init(int(device_count))
        _state["enabled"] = True


def mode():
    """How cudalloc is installed into PyTorch: "adapter", "pluggable", or None."""
    return _state["mode"]


def is_enabled():
    """True once enable() has installed cudalloc into PyTorch in this process."""
    return _state["enabled"]
