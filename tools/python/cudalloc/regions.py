"""Sleep and wake from Python: memory allocated inside `with cudalloc.region(tag):` can be
paused (its device memory given back to the driver, its bytes kept on the host or dropped)
and resumed at the same addresses, so tensors, views and captured CUDA graphs stay valid.

    with cudalloc.region("weights"):
        model = build_model().cuda()
    with cudalloc.region("kv_cache"):
        cache = torch.empty(n, device="cuda")
    cudalloc.prepare_pause("weights")       # optional: pin the host memory ahead of the pause
    cudalloc.pause("weights", keep=True)    # bytes to pinned host pages at the same addresses
    cudalloc.pause("kv_cache", keep=False)  # dropped: zero after resume
    ...                                     # another model uses the freed device memory
    cudalloc.resume("weights")
    cudalloc.resume("kv_cache")

Works with cudalloc.enable() (PyTorch allocates through cudalloc) and under LD_PRELOAD of
libcudalloc_preload.so, where it tags the segments PyTorch's own caching allocator takes.
The C API's rules (cudalloc.h, "Regions") apply: a kept region stays readable and writable by
kernels while paused (host memory over the bus); a dropped one must not be touched until
resume (a kernel that does faults with an illegal-address error)."""

import contextlib
import ctypes

from ._capi import _check, _function


def _tag(tag):
    if not isinstance(tag, str):
        raise TypeError(f"a region tag is a str, got {type(tag).__name__}")
    return tag.encode("utf-8")


@contextlib.contextmanager
def region(tag):
    """Allocations of this thread inside the block (and private pools created in it, such as
    a CUDA graph's) belong to region `tag`. Regions nest; the innermost one is current."""
    _check(_function("cudalloc_region_begin")(_tag(tag)), "cudalloc_region_begin")
    try:
        yield tag
    finally:
        _check(_function("cudalloc_region_end")(), "cudalloc_region_end")


def pause(tag, keep=True):
    """Waits for the region's work, then gives its device memory back to the driver. keep:
    its bytes move to host memory at the same addresses (host_limit applies, and pause fails
    changing nothing without room); else they are dropped (zero after resume)."""
    _check(_function("cudalloc_pause")(_tag(tag), 1 if keep else 0), "cudalloc_pause")


def prepare_pause(tag):
    """Pins now the host memory that pause(tag, keep=True) would copy the region into, and
    keeps it cached for that pause, so that the pause only copies (pinning costs about ten
    times the copy). host_limit applies; empty_cache returns the memory unused."""
    _check(_function("cudalloc_prepare_pause")(_tag(tag)), "cudalloc_prepare_pause")


def resume(tag):
    """Maps device memory at the region's addresses again and restores its bytes."""
    _check(_function("cudalloc_resume")(_tag(tag)), "cudalloc_resume")


def region_residency(tag):
    """(device_bytes, host_bytes) of the region's memory, over every device."""
    dev, host = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _check(_function("cudalloc_region_residency")(_tag(tag), ctypes.byref(dev),
                                                  ctypes.byref(host)),
           "cudalloc_region_residency")
    return dev.value, host.value


def is_paused(tag):
    """Whether region `tag` is paused."""
    paused = ctypes.c_int(0)
    _check(_function("cudalloc_region_paused")(_tag(tag), ctypes.byref(paused)),
           "cudalloc_region_paused")
    return bool(paused.value)
