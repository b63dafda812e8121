/* cudalloc: a caching allocator for CUDA device memory. C API.
 *
 * Every function is thread-safe and never throws. Functions returning cudalloc_error_t use
 * the numeric values of the CUDA runtime's cudaError_t, so a caller may compare them with
 * cudaSuccess, cudaErrorMemoryAllocation, ... directly. After a failure,
 * cudalloc_last_error_string() describes it (per thread).
 *
 * Streams: memory allocated on stream S may be used by work on S right away and is reused
 * after it is freed in the order of S. Work on other streams that uses the memory must either
 * be ordered before the free by the caller, or be declared with cudalloc_record_stream().
 *
 * Devices: every function that takes a device accepts 0 .. cudalloc_device_count() - 1, and
 * -1 for the current device (or for every initialised device where a function says "all").
 * Any other number, negative or too large, gives CUDALLOC_ERROR_INVALID_DEVICE (the answer of
 * cudaSetDevice to a bad ordinal) before any other argument is looked at. Without a device
 * at all (no driver), functions give CUDALLOC_ERROR_NO_DEVICE.
 *
 * NULL pointers get the answers of the matching CUDA or PyTorch call: freeing NULL and
 * recording a stream on NULL (PyTorch's zero-element tensors) are successful no-ops;
 * offload, prefetch and residency of NULL give CUDALLOC_ERROR_INVALID_DEVICE_POINTER; a NULL
 * output pointer is CUDALLOC_ERROR_INVALID_VALUE.
 *
 * Configuration comes from the environment variable CUDALLOC_CONF ("key:value,key:value"),
 * logging from CUDALLOC_LOG (trace|debug|info|warn|error|off), and the device from
 * CUDALLOC_DEVICE (cuda | fake[:CAPACITY[:DEVICES]]). See README.md for every key.
 */
#ifndef CUDALLOC_H
#define CUDALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The same type as the CUDA runtime's cudaStream_t; compatible with <cuda_runtime.h>. */
typedef struct CUstream_st* cudaStream_t;

#define CUDALLOC_VERSION_MAJOR 0
#define CUDALLOC_VERSION_MINOR 1
#define CUDALLOC_VERSION_PATCH 0

typedef enum cudalloc_error_t {
  CUDALLOC_SUCCESS = 0,                   /* cudaSuccess */
  CUDALLOC_ERROR_INVALID_VALUE = 1,       /* cudaErrorInvalidValue */
  CUDALLOC_ERROR_MEMORY_ALLOCATION = 2,   /* cudaErrorMemoryAllocation: out of memory */
  CUDALLOC_ERROR_INITIALIZATION = 3,      /* cudaErrorInitializationError */
  CUDALLOC_ERROR_INVALID_DEVICE_POINTER = 17, /* cudaErrorInvalidDevicePointer */
  CUDALLOC_ERROR_NO_DEVICE = 100,         /* cudaErrorNoDevice */
  CUDALLOC_ERROR_INVALID_DEVICE = 101,    /* cudaErrorInvalidDevice */
  CUDALLOC_ERROR_NOT_SUPPORTED = 801,     /* cudaErrorNotSupported */
  CUDALLOC_ERROR_UNKNOWN = 999            /* cudaErrorUnknown */
} cudalloc_error_t;

/* Version as MAJOR*10000 + MINOR*100 + PATCH; cudalloc_version_string() gives "0.1.0". */
int cudalloc_version(void);
const char* cudalloc_version_string(void);

/* Description of the calling thread's last failure ("" if none yet). A successful call
 * leaves it unchanged (like errno); it is valid until the next failure on this thread. */
const char* cudalloc_last_error_string(void);
const char* cudalloc_error_name(cudalloc_error_t error);

/* ---- Allocation ---------------------------------------------------------------------- */

/* Allocates `size` bytes on `device` (-1: the current device) for use on `stream`.
 * The pointer is aligned to at least 256 bytes. size 0 gives *ptr == NULL and success. */
cudalloc_error_t cudalloc_allocate(void** ptr, size_t size, int device, cudaStream_t stream);
/* Frees memory from cudalloc_allocate. NULL is a no-op. A pointer cudalloc did not hand out,
 * or one already freed, gives CUDALLOC_ERROR_INVALID_DEVICE_POINTER and changes nothing.
 * `device` may be -1 (cudalloc finds the owner). */
cudalloc_error_t cudalloc_deallocate(void* ptr, int device);
/* Marks `ptr` as used by work on `stream`: its memory is reused only after the work queued on
 * `stream` before its free has finished. NULL is a no-op (success). */
cudalloc_error_t cudalloc_record_stream(void* ptr, cudaStream_t stream);
/* Returns every cached, unused segment of `device` (-1: all devices) to the driver, after
 * waiting for the work that may still use it. */
cudalloc_error_t cudalloc_empty_cache(int device);
/* Caps the memory cudalloc reserves on `device` at fraction * total device memory. */
cudalloc_error_t cudalloc_set_memory_fraction(double fraction, int device);
/* Caps the memory cudalloc reserves on `device` at `bytes` (0: no cap). */
cudalloc_error_t cudalloc_set_memory_limit(size_t bytes, int device);

/* ---- Host offload (CUDALLOC_CONF offload:host; moving needs vmm) ---------------------- */
/* Moves the pages under the live allocation `ptr` (the pointer cudalloc handed out) to host
 * memory (offload) or device memory (prefetch). The address does not change: kernels keep
 * using `ptr`, reading host memory over the bus while it is there. The copy is ordered after
 * the work queued so far on `stream` and on the stream the allocation was made on; the call
 * returns when the move is complete.
 * The caller guarantees that no work uses the allocation while the call runs (work queued
 * before the call is fine: the call waits for it). An allocation smaller than a page (2 MiB)
 * shares its pages with neighbours allocated on the same stream, which move with it under the
 * same rule. On failure every page is on its old or its new backing with its bytes: the
 * allocation stays valid. Errors: CUDALLOC_ERROR_INVALID_DEVICE_POINTER (not a live
 * allocation), CUDALLOC_ERROR_MEMORY_ALLOCATION (no room on the other side: host_limit or
 * the device budget), CUDALLOC_ERROR_NOT_SUPPORTED (not in paged memory: vmm:0, no VMM, or
 * spilled to pinned host memory). */
cudalloc_error_t cudalloc_offload(void* ptr, cudaStream_t stream);
cudalloc_error_t cudalloc_prefetch(void* ptr, cudaStream_t stream);
/* Moves every page spilled or offloaded to the host back to `device` (-1: all devices) while
 * the device budget has room; success also when some stays on the host. Same rule as above
 * for work using that memory meanwhile. */
cudalloc_error_t cudalloc_promote(int device);
/* How many bytes of the live allocation `ptr` lie in device and in host memory. */
cudalloc_error_t cudalloc_residency(const void* ptr, size_t* device_bytes, size_t* host_bytes);

/* ---- Regions: sleep and wake by tag ---------------------------------------------------
 * A region is memory allocated while its tag is the calling thread's current one, on every
 * device: cudalloc_region_begin(tag) makes `tag` current (nestable; tags of 1 to 255 bytes),
 * cudalloc_region_end() returns to the enclosing one (the default, untagged region at the
 * outside). Requests of other threads, and requests routed to a private pool, are not
 * affected, except that a private pool (a CUDA graph's, a MemPool) created while a tag is
 * current belongs to that region. Under LD_PRELOAD this tags the segments that the
 * program's own allocator (PyTorch's caching allocator, say) takes with cudaMalloc.
 *
 * cudalloc_pause waits for the work that uses the region (with the PyTorch integration or
 * this API: the region's streams and those named by record_stream; under LD_PRELOAD, where
 * any stream may use it, the whole device), then gives its device memory back to the driver
 * (free memory rises by the region's size) and keeps its addresses reserved:
 *   keep_contents != 0  its bytes move to host memory, mapped at the same addresses: kernels
 *                       still read and write them, over the bus. host_limit applies: when the
 *                       host has no room pause fails with CUDALLOC_ERROR_MEMORY_ALLOCATION
 *                       before changing anything;
 *   keep_contents == 0  its bytes are dropped and its addresses unmapped: a kernel that
 *                       touches them faults with cudaErrorIllegalAddress (a sticky error,
 *                       as any access to unmapped memory), never reads stale bytes.
 * cudalloc_resume maps device memory at the same addresses and restores the kept bytes;
 * dropped memory comes back zeroed. CUDA graphs captured over the region replay unchanged
 * after resume. While paused, an allocation in the region fails
 * (CUDALLOC_ERROR_INVALID_VALUE) and frees are accepted. Pausing needs paged memory (vmm:1,
 * the default): CUDALLOC_ERROR_NOT_SUPPORTED in plain segments and for memory shared with
 * another process. A driver failure part way leaves every page on its old or its new backing
 * with its bytes: a region whose keep failed stays active (pause may be repeated), one whose
 * drop or resume failed is paused (resume may be repeated); with several devices, pause
 * skips those already paused. A tag that no allocation used is
 * CUDALLOC_ERROR_INVALID_VALUE.
 *
 * cudalloc_prepare_pause pins now the host memory that cudalloc_pause(tag, 1) would copy the
 * region into, and keeps it cached for that pause: pinning host memory costs about ten times
 * the copy (an H200 pins 4-5 GiB/s, with one thread or eight), so a first pause that pins is
 * several times slower than later ones, which reuse what the first pinned. Call it while the
 * GPU does other work (loading a model, say); it blocks allocations on the device meanwhile,
 * as pause does. host_limit applies: CUDALLOC_ERROR_MEMORY_ALLOCATION, pinning nothing, when
 * the host has no room for the whole region; a driver failure part way returns its error and
 * keeps what was pinned. The memory stays cached (host reserved in the stats) until a pause
 * uses it or cudalloc_empty_cache returns it. CUDALLOC_ERROR_INVALID_VALUE while paused.
 *
 * A region's memory is held in physical allocations of up to 64 MiB that pause and resume move
 * whole: cudalloc_offload and cudalloc_prefetch of it, and sharing it with another process
 * (CUDA IPC), answer CUDALLOC_ERROR_NOT_SUPPORTED. */
cudalloc_error_t cudalloc_region_begin(const char* tag);
cudalloc_error_t cudalloc_region_end(void);
cudalloc_error_t cudalloc_pause(const char* tag, int keep_contents);
cudalloc_error_t cudalloc_prepare_pause(const char* tag);
cudalloc_error_t cudalloc_resume(const char* tag);
/* Bytes of the region's memory on the devices and on the host (both 0 when dropped). */
cudalloc_error_t cudalloc_region_residency(const char* tag, size_t* device_bytes,
                                           size_t* host_bytes);
/* *paused: 1 while the region is paused, else 0. */
cudalloc_error_t cudalloc_region_paused(const char* tag, int* paused);

/* ---- PyTorch CUDAPluggableAllocator entry points (exactly its ABI) -------------------- */
/* torch.cuda.memory.CUDAPluggableAllocator(path, "cudalloc_malloc", "cudalloc_free").
 * For PyTorch (a C++ caller) only: PyTorch does not check the result for NULL, so on failure
 * cudalloc_malloc throws a C++ std::runtime_error whose message starts with "CUDA out of
 * memory." for out-of-memory, which PyTorch raises in Python as a RuntimeError. C programs
 * use cudalloc_allocate, which never throws. */
void* cudalloc_malloc(size_t size, int device, cudaStream_t stream);
void cudalloc_free(void* ptr, size_t size, int device, cudaStream_t stream);
/* Optional hooks: set_init_fn, set_reset_fn, set_memory_fraction_fn, set_record_stream_fn. */
void cudalloc_torch_init(int device_count);
void cudalloc_torch_reset(void);
void cudalloc_torch_memory_fraction(double fraction, int device);
void cudalloc_torch_record_stream(void* ptr, cudaStream_t stream);

/* ---- Private pools (CUDA graphs, PyTorch's MemPool) --------------------------------- */
/* A private pool's memory serves only requests routed to it, and stays the pool's while it
 * has users: what a CUDA graph needs for the memory it captured (the graph keeps using the
 * addresses of blocks freed during its capture). Frees return memory to its pool; when the
 * last user releases the pool, its memory joins the shared cache as it becomes free (after
 * one device synchronization for graph launches still queued). Pool memory is plain device
 * memory (never paged or spilled). Ids are nonzero and chosen by the caller. */
typedef uint64_t cudalloc_pool_t;
/* Creates the pool with one user, or adds a user. */
cudalloc_error_t cudalloc_pool_create(cudalloc_pool_t pool, int device);
/* Drops a user; CUDALLOC_ERROR_INVALID_VALUE for a pool not created or already released. */
cudalloc_error_t cudalloc_pool_release(cudalloc_pool_t pool, int device);
/* Users of the pool (0 once released, or never created). */
cudalloc_error_t cudalloc_pool_use_count(cudalloc_pool_t pool, int device, int* count);
/* cudalloc_allocate, routed to `pool` (0: the shared pools, as cudalloc_allocate). A request
 * made while `stream` is being captured never synchronizes: when the pool and the device
 * have no room it fails with CUDALLOC_ERROR_MEMORY_ALLOCATION. */
cudalloc_error_t cudalloc_allocate_in_pool(void** ptr, size_t size, int device,
                                           cudaStream_t stream, cudalloc_pool_t pool);
/* The live allocations of `pool` in address order: *count receives how many there are, and
 * the first min(count, capacity) go to `ptrs` (which may be NULL when capacity is 0). */
cudalloc_error_t cudalloc_pool_allocations(cudalloc_pool_t pool, int device, void** ptrs,
                                           size_t capacity, size_t* count);
/* Checkpoints of a private pool (PyTorch's cudagraph trees). A checkpoint is the pool's live
 * allocations with their block sizes, in address order: *count receives how many, the first
 * min(count, capacity) go to `out`. cudalloc_pool_restore frees every allocation of the pool
 * that is live now (their addresses to `freed`, whose capacity must hold them all: ask
 * cudalloc_pool_allocations; *freed_count receives how many) and makes exactly the
 * checkpoint's allocations live again at their addresses. Nothing queued may still use the
 * pool's memory. CUDALLOC_ERROR_INVALID_VALUE, with nothing changed, when the checkpoint does
 * not fit the pool's segments or `freed` is too small. */
typedef struct cudalloc_pool_allocation {
  void* ptr;
  size_t size;       /* the block's size */
  size_t requested;  /* the size asked for */
} cudalloc_pool_allocation_t;
cudalloc_error_t cudalloc_pool_checkpoint(cudalloc_pool_t pool, int device,
                                          cudalloc_pool_allocation_t* out, size_t capacity,
                                          size_t* count);
cudalloc_error_t cudalloc_pool_restore(cudalloc_pool_t pool, int device,
                                       const cudalloc_pool_allocation_t* checkpoint,
                                       size_t count, void** freed, size_t capacity,
                                       size_t* freed_count);

/* ---- CUDA IPC ------------------------------------------------------------------------ */
/* The legacy IPC handle (64 bytes, a cudaIpcMemHandle_t) of the memory under the live
 * allocation `ptr`, and `ptr`'s offset from the address that handle opens at in another
 * process (cudaIpcOpenMemHandle). Only plain segments carry one: paged memory (the default
 * with VMM) gives CUDALLOC_ERROR_NOT_SUPPORTED; CUDALLOC_CONF=vmm:0 makes all memory plain. */
#define CUDALLOC_IPC_HANDLE_BYTES 64
cudalloc_error_t cudalloc_ipc_handle(const void* ptr, void* handle, size_t* offset);
/* Paged memory, shared as its physical pages: one POSIX file descriptor per page under the
 * live allocation `ptr`, open in this process for as long as the page exists (never close
 * them). *count receives the number of pages, and the first min(count, capacity) descriptors
 * go to `fds` (capacity 0 asks for the count only); *page_size is the pages' size and
 * *offset ptr's offset from the first page's start. Another process maps them with
 * cudalloc_ipc_open_pages, or, in PyTorch's wire format, with PyTorch's own allocator
 * (expandable segments use the same scheme). The first share (here or cudalloc_ipc_handle)
 * lets processes of the same user take this process's descriptors over (prctl
 * PR_SET_PTRACER_ANY: pidfd_getfd needs ptrace permission). While shared, the allocation's memory cannot move to the host tier.
 * CUDALLOC_ERROR_NOT_SUPPORTED for plain memory (use cudalloc_ipc_handle), host-tier pages
 * and drivers or containers without file-descriptor handles. */
cudalloc_error_t cudalloc_ipc_share_pages(const void* ptr, size_t* page_size, size_t* offset,
                                          int* fds, size_t capacity, size_t* count);
/* Maps, on `device` (-1: current), the `count` pages of `page_size` bytes that process `pid`
 * shared as the descriptors `fds` (their numbers in that process), in order, at a new address
 * range; *base receives its start (the shared allocation lies at *base + offset). Needs
 * pidfd_getfd (Linux 5.6) and permission to ptrace `pid`. */
cudalloc_error_t cudalloc_ipc_open_pages(int pid, const int* fds, size_t count,
                                         size_t page_size, int device, void** base);
/* Unmaps a range cudalloc_ipc_open_pages returned, after this process's queued work on the
 * device is done. CUDALLOC_ERROR_INVALID_DEVICE_POINTER for any other address. */
cudalloc_error_t cudalloc_ipc_close_pages(void* base);

/* ---- Inspection ---------------------------------------------------------------------- */
/* The largest free block a request on `device` could get from the cache without new device
 * memory (PyTorch's cacheInfo). */
cudalloc_error_t cudalloc_largest_free_block(int device, size_t* bytes);
/* Free and total memory as a program should see them (cudaMemGetInfo, within the cap). */
cudalloc_error_t cudalloc_memory_info(int device, size_t* free_bytes, size_t* total_bytes);
/* The reserve cap set by fraction (1.0: none). */
cudalloc_error_t cudalloc_get_memory_fraction(int device, double* fraction);

typedef struct cudalloc_block_info_t {
  uintptr_t address;
  size_t size;      /* rounded */
  size_t requested; /* what the caller asked for (allocated and pending blocks) */
  int32_t state;    /* 0 free, 1 allocated, 2 pending (freed, waiting for streams) */
} cudalloc_block_info_t;

typedef struct cudalloc_segment_info_t {
  uintptr_t address;
  size_t size;
  cudaStream_t stream;
  cudalloc_pool_t pool;  /* its private pool, 0 for the shared pools */
  int32_t paged;         /* a run of mapped pages of a paged segment */
  int32_t small;         /* carved into slabs for small sizes */
  size_t host_bytes;     /* bytes of it in host memory (the host tier) */
  size_t first_block;    /* index of its first block in the blocks array */
  size_t block_count;
} cudalloc_segment_info_t;

/* The segments of `device` in address order and their blocks, as a snapshot shows them.
 * *segment_count and *block_count receive the sizes needed; when either capacity is too
 * small (or an array is NULL) nothing is written and CUDALLOC_ERROR_INVALID_VALUE is
 * returned: call again with larger arrays (the state may have grown meanwhile). */
cudalloc_error_t cudalloc_get_segments(int device, cudalloc_segment_info_t* segments,
                                       size_t segment_capacity, size_t* segment_count,
                                       cudalloc_block_info_t* blocks, size_t block_capacity,
                                       size_t* block_count);

/* ---- Statistics ---------------------------------------------------------------------- */
/* Every statistic is a counter with the current value, its peak since the last reset, and
 * the running total of increases. Names and order come from one list (stats_fields.h);
 * cudalloc_stat_name(i) gives the name of entry i of cudalloc_stats_t.values. */
typedef struct cudalloc_stat_t {
  int64_t current;
  int64_t peak;
  int64_t total;
} cudalloc_stat_t;

#define CUDALLOC_MAX_STATS 64
typedef struct cudalloc_stats_t {
  int32_t count; /* number of valid entries in values */
  int32_t device;
  cudalloc_stat_t values[CUDALLOC_MAX_STATS];
} cudalloc_stats_t;

int cudalloc_stat_count(void);
const char* cudalloc_stat_name(int index);
/* PyTorch's name for statistic `index` as torch.cuda.memory_stats() keys it ("allocation",
 * "reserved_bytes", "num_ooms", ...), or NULL where PyTorch has none. *is_gauge (if not NULL)
 * receives 1 for a gauge ("<name>.all.current", ".peak", ".allocated", ".freed"), 0 for a
 * counter ("<name>": the total). */
const char* cudalloc_stat_torch_name(int index, int* is_gauge);
/* Fills `out` for `device` (-1: the current device). */
cudalloc_error_t cudalloc_get_stats(int device, cudalloc_stats_t* out);
/* Resets peaks to current values. */
cudalloc_error_t cudalloc_reset_peak_stats(int device);
/* Number of devices cudalloc sees (0 without a driver). */
int cudalloc_device_count(void);
/* Checks every internal invariant of `device` (-1: all initialised devices); returns
 * CUDALLOC_SUCCESS or CUDALLOC_ERROR_UNKNOWN with the first violation in the last error. */
cudalloc_error_t cudalloc_validate(int device);

/* ---- Snapshots ----------------------------------------------------------------------- */
/* Writes a JSON snapshot of every initialised device in PyTorch's memory-snapshot schema
 * (plus a "cudalloc" section) to `path` ("%p" expands to the process id). Takes each device's
 * lock only to copy its state; never allocates device memory. */
cudalloc_error_t cudalloc_snapshot(const char* path);
/* The same snapshot as a NUL-terminated string in `buffer`. *length receives the string's
 * length; if `capacity` is too small (or buffer is NULL) nothing is written and
 * CUDALLOC_ERROR_INVALID_VALUE is returned, so call again with *length + 1 bytes. */
cudalloc_error_t cudalloc_snapshot_json(char* buffer, size_t capacity, size_t* length);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CUDALLOC_H */
