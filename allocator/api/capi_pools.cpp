// The C API's private pools and inspection entry points (cudalloc.h).
#include <vector>

#include "api/capi_support.h"

using namespace cudalloc;
using namespace cudalloc::capi;

static_assert(CUDALLOC_IPC_HANDLE_BYTES == device::Device::kIpcHandleBytes);

namespace {

int block_state_code(BlockState::Kind kind) {
  switch (kind) {
    case BlockState::Kind::free: return 0;
    case BlockState::Kind::allocated: return 1;
    case BlockState::Kind::pending: return 2;
  }
  return 0;
}

}  // namespace

extern "C" {

cudalloc_error_t cudalloc_pool_create(cudalloc_pool_t pool, int device) {
  return on_device(device, MinusOne::current,
                   [&](DeviceAllocator& d) { return d.create_private_pool(pool); });
}

cudalloc_error_t cudalloc_pool_release(cudalloc_pool_t pool, int device) {
  return on_device(device, MinusOne::current,
                   [&](DeviceAllocator& d) { return d.release_private_pool(pool); });
}

cudalloc_error_t cudalloc_pool_use_count(cudalloc_pool_t pool, int device, int* count) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (count == nullptr) return fail(Error::invalid_value, "pool_use_count: count is NULL");
    *count = d.private_pool_use_count(pool);
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_allocate_in_pool(void** ptr, size_t size, int device,
                                           cudaStream_t stream, cudalloc_pool_t pool) {
  if (ptr != nullptr) *ptr = nullptr;
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (ptr == nullptr) return fail(Error::invalid_value, "allocate_in_pool: ptr is NULL");
    return after_out_of_memory(d, size, stream, d.allocate(size, handle(stream), ptr, pool));
  });
}

cudalloc_error_t cudalloc_pool_allocations(cudalloc_pool_t pool, int device, void** ptrs,
                                           size_t capacity, size_t* count) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (count == nullptr || (ptrs == nullptr && capacity != 0)) {
      return fail(Error::invalid_value, "pool_allocations: count is NULL or ptrs is NULL");
    }
    std::vector<std::uintptr_t> live;
    if (const Error err = d.private_pool_allocations(pool, &live); err != Error::ok) return err;
    *count = live.size();
    for (std::size_t i = 0; i < live.size() && i < capacity; ++i) {
      ptrs[i] = reinterpret_cast<void*>(live[i]);
    }
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_pool_checkpoint(cudalloc_pool_t pool, int device,
                                          cudalloc_pool_allocation_t* out, size_t capacity,
                                          size_t* count) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (count == nullptr || (out == nullptr && capacity != 0)) {
      return fail(Error::invalid_value, "pool_checkpoint: count is NULL or out is NULL");
    }
    std::vector<PoolAllocation> live;
    if (const Error err = d.checkpoint_private_pool(pool, &live); err != Error::ok) return err;
    *count = live.size();
    for (std::size_t i = 0; i < live.size() && i < capacity; ++i) {
      out[i] = {reinterpret_cast<void*>(live[i].addr), live[i].size, live[i].requested};
    }
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_pool_restore(cudalloc_pool_t pool, int device,
                                       const cudalloc_pool_allocation_t* checkpoint,
                                       size_t count, void** freed, size_t capacity,
                                       size_t* freed_count) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (freed_count == nullptr || (checkpoint == nullptr && count != 0) ||
        (freed == nullptr && capacity != 0)) {
      return fail(Error::invalid_value, "pool_restore: a NULL argument");
    }
    std::vector<std::uintptr_t> live;
    if (const Error err = d.private_pool_allocations(pool, &live); err != Error::ok) return err;
    if (live.size() > capacity) {
      *freed_count = live.size();
      return fail(Error::invalid_value, "pool_restore: room for %zu freed addresses, %zu live",
                  capacity, live.size());
    }
    std::vector<PoolAllocation> wanted(count);
    for (std::size_t i = 0; i < count; ++i) {
      wanted[i] = {reinterpret_cast<std::uintptr_t>(checkpoint[i].ptr), checkpoint[i].size,
                   checkpoint[i].requested};
    }
    std::vector<std::uintptr_t> gone;
    if (const Error err = d.restore_private_pool(pool, wanted, &gone); err != Error::ok) {
      return err;
    }
    *freed_count = gone.size();
    for (std::size_t i = 0; i < gone.size() && i < capacity; ++i) {
      freed[i] = reinterpret_cast<void*>(gone[i]);
    }
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_ipc_handle(const void* ptr, void* handle, size_t* offset) {
  return on_owner(ptr, "ipc_handle", [&](DeviceAllocator& d) {
    if (handle == nullptr || offset == nullptr) {
      return fail(Error::invalid_value, "ipc_handle: handle or offset is NULL");
    }
    return d.ipc_handle(ptr, static_cast<unsigned char*>(handle), offset);
  });
}

cudalloc_error_t cudalloc_ipc_share_pages(const void* ptr, size_t* page_size, size_t* offset,
                                          int* fds, size_t capacity, size_t* count) {
  return on_owner(ptr, "ipc_share_pages", [&](DeviceAllocator& d) {
    if (page_size == nullptr || offset == nullptr || count == nullptr ||
        (fds == nullptr && capacity != 0)) {
      return fail(Error::invalid_value,
                  "ipc_share_pages: page_size, offset or count is NULL, or fds is NULL");
    }
    return d.share_pages(ptr, page_size, offset, fds, capacity, count);
  });
}

cudalloc_error_t cudalloc_ipc_open_pages(int pid, const int* fds, size_t count,
                                         size_t page_size, int device, void** base) {
  if (base != nullptr) *base = nullptr;
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (base == nullptr) return fail(Error::invalid_value, "ipc_open_pages: base is NULL");
    return d.open_shared_pages(pid, fds, count, page_size, base);
  });
}

cudalloc_error_t cudalloc_ipc_close_pages(void* base) {
  return guarded([&]() -> Error {
    DeviceAllocator* owner = nullptr;
    if (base != nullptr) {
      process_allocator().for_each_device([&](DeviceAllocator& d) {
        if (owner == nullptr && d.owns_shared_pages(base)) owner = &d;
      });
    }
    if (owner == nullptr) {
      return fail(Error::invalid_pointer, "ipc_close_pages: %p is no shared memory opened here",
                  base);
    }
    return owner->close_shared_pages(base);
  });
}

cudalloc_error_t cudalloc_largest_free_block(int device, size_t* bytes) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (bytes == nullptr) return fail(Error::invalid_value, "largest_free_block: bytes is NULL");
    *bytes = d.largest_free_block();
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (free_bytes == nullptr || total_bytes == nullptr) {
      return fail(Error::invalid_value, "memory_info: an output is NULL");
    }
    return d.memory_info(free_bytes, total_bytes);
  });
}

cudalloc_error_t cudalloc_get_memory_fraction(int device, double* fraction) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (fraction == nullptr) return fail(Error::invalid_value, "get_memory_fraction: NULL");
    *fraction = d.settings().fraction;
    return Error::ok;
  });
}

cudalloc_error_t cudalloc_get_segments(int device, cudalloc_segment_info_t* segments,
                                       size_t segment_capacity, size_t* segment_count,
                                       cudalloc_block_info_t* blocks, size_t block_capacity,
                                       size_t* block_count) {
  return on_device(device, MinusOne::current, [&](DeviceAllocator& d) {
    if (segment_count == nullptr || block_count == nullptr) {
      return fail(Error::invalid_value, "get_segments: a count is NULL");
    }
    const DeviceState st = d.state();
    std::size_t nblocks = 0;
    for (const SegmentState& s : st.segments) nblocks += s.blocks.size();
    *segment_count = st.segments.size();
    *block_count = nblocks;
    if (segments == nullptr || blocks == nullptr || segment_capacity < st.segments.size() ||
        block_capacity < nblocks) {
      return fail(Error::invalid_value, "get_segments: room for %zu segments and %zu blocks "
                  "needed", st.segments.size(), nblocks);
    }
    std::size_t b = 0;
    for (std::size_t i = 0; i < st.segments.size(); ++i) {
      const SegmentState& s = st.segments[i];
      segments[i] = cudalloc_segment_info_t{s.base, s.size,
                                            reinterpret_cast<cudaStream_t>(s.stream),
                                            s.private_pool, s.paged ? 1 : 0,
                                            s.has_slabs ? 1 : 0, s.host_bytes, b,
                                            s.blocks.size()};
      for (const BlockState& bs : s.blocks) {
        blocks[b++] = cudalloc_block_info_t{bs.addr, bs.size, bs.requested,
                                            block_state_code(bs.kind)};
      }
    }
    return Error::ok;
  });
}

}  // extern "C"
