"""Installing cudalloc as PyTorch's CUDA allocator (CUDAPluggableAllocator and its hooks).
torch is imported only inside enable(), so the rest of the package works without it."""

import ctypes

from ._capi import _lib, _lock, library_path


class TooLateError(RuntimeError):
    """enable() ran after PyTorch had already initialised its own CUDA allocator."""


# PyTorch hook setter on alloc._allocator -> the C function it receives.
_TORCH_HOOKS = [
    ("set_init_fn", "cudalloc_torch_init"),
    ("set_reset_fn", "cudalloc_torch_reset"),
    ("set_memory_fraction_fn", "cudalloc_torch_memory_fraction"),
    ("set_record_stream_fn", "cudalloc_torch_record_stream"),
]

_state = {"enabled": False, "torch_allocator": None}


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
