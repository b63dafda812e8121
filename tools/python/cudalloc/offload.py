"""The host tier from Python: offload() and prefetch() move a live allocation between device
and host memory at the same address (CUDALLOC_CONF=offload:host)."""

import ctypes
import operator

from ._capi import _check, _function

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
