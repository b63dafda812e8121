"""cudalloc from Python: install it as PyTorch's CUDA allocator and read its statistics.

`pip install .` in a checkout puts the libraries and the CLI inside this package; then
preload_path() is the path to give LD_PRELOAD, and `python -m cudalloc` (or the `cudalloc`
command) runs the CLI.

Pure Python over ctypes. The library (libcudalloc.so) is found on first use:
$CUDALLOC_LIBRARY if set (and then only that path), else inside this package, else in the
build folder of a source checkout, else through the dynamic loader; one whose C API version
differs from this module's (API_VERSION) is refused with an error saying so.

PyTorch can swap its CUDA allocator only before the allocator is initialised, that is before
the first CUDA tensor exists, so enable() belongs at the very top of a script::

    import cudalloc
    cudalloc.enable()                  # before any CUDA work

    import torch
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    del x, y
    print(torch.cuda.memory_summary())  # cudalloc's figures under PyTorch's names
    print(cudalloc.stats()["reserved_bytes"])

With the PyTorch adapter built (libcudalloc_torch.so beside libcudalloc.so) every PyTorch
memory feature works as with PyTorch's own allocator (docs/pytorch.md); without it enable()
falls back to CUDAPluggableAllocator, where torch.cuda.empty_cache(),
set_per_process_memory_fraction(), Tensor.record_stream() and the stats functions work.

With the host tier (CUDALLOC_CONF=offload:host), offload() and prefetch() move a live
tensor's memory to host / device memory at the same address, and the tensor stays a CUDA
tensor throughout; no kernel may use it while the call runs::

    loss.backward()
    cudalloc.prefetch_optimizer_state(opt)   # back on the device for the update
    opt.step()
    cudalloc.offload_optimizer_state(opt)    # off the device for forward and backward
"""

# The public names live in five modules: _capi (the C API: loading, control, statistics,
# snapshots), torch (enable() into PyTorch), offload (the host tier), regions (sleep and
# wake) and summary.
from ._capi import (API_VERSION, LIBRARY_NAME, MAX_STATS, CudallocError, cli_path,
                    device_count, dump_snapshot, empty_cache, library_path, preload_path,
                    reset_peak_stats, set_memory_fraction,
                    set_memory_limit, snapshot, stat_names, stats, torch_memory_stats,
                    validate, version)
from .offload import (offload, offload_optimizer_state, prefetch, prefetch_optimizer_state,
                      promote, residency)
from .regions import is_paused, pause, prepare_pause, region, region_residency, resume
from .summary import memory_summary
from .torch import TooLateError, adapter_path, enable, is_enabled, mode

# Tracebacks and pickles name the errors as users import them.
CudallocError.__module__ = TooLateError.__module__ = __name__

__all__ = [
    "CudallocError", "TooLateError", "enable", "is_enabled", "mode", "adapter_path",
    "library_path", "preload_path", "cli_path", "stats", "stat_names", "torch_memory_stats", "empty_cache",
    "reset_peak_stats", "set_memory_fraction",
    "set_memory_limit", "validate", "version", "device_count", "memory_summary",
    "snapshot", "dump_snapshot", "offload", "prefetch", "promote", "residency",
    "offload_optimizer_state", "prefetch_optimizer_state",
    "region", "pause", "prepare_pause", "resume", "region_residency", "is_paused",
]
