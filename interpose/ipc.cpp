// CUDA IPC under LD_PRELOAD (shim.h, "CUDA IPC").
//
// cudalloc's memory lies inside its own segments, so the driver's legacy handle of it would
// be wrong: for plain memory it opens at the segment's base, not at the allocation (another
// process would read the wrong bytes), and paged memory has none. cudaIpcGetMemHandle of
// cudalloc's memory therefore writes a handle of cudalloc's own: it names this process and
// a record kept here, which the importing process (under the preload library as well) reads
// with process_vm_readv and opens:
//   plain  the record holds the driver's legacy handle of the segment and the allocation's
//          offset: the importer opens the legacy handle (once per segment, counted) and adds
//          the offset;
//   pages  the record holds one POSIX file descriptor per physical page
//          (cudalloc_ipc_share_pages): the importer takes them over with pidfd_getfd and maps
//          them (cudalloc_ipc_open_pages).
// Both need permission to ptrace the exporter, which the first paged share grants to
// processes of the same user (cudalloc.h). A handle of other memory is the driver's own and
// opens as without cudalloc; a process without the preload library cannot open cudalloc's
// handles (the driver refuses them: an error, never wrong memory).
//
// Records live until the allocation is freed (ipc_forget). Every entry point is noexcept
// and allocates nothing on its error paths.
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "api/cudalloc.h"
#include "interpose/shim.h"

namespace cudalloc::interpose {
namespace {

constexpr char kHandleMagic[8] = {'c', 'u', 'd', 'a', 'l', 'l', 'o', 'c'};
constexpr char kRecordMagic[8] = {'c', 'd', 'l', '-', 'r', 'e', 'c', '1'};
constexpr std::uint32_t kPlain = 1, kPages = 2;
constexpr std::uint32_t kMaxPages = 1u << 20;  // 2 TiB of 2 MiB pages: more is malformed
constexpr int kMapFailed = 205;  // cudaErrorMapBufferObjectFailed / CUDA_ERROR_MAP_FAILED

// The 64 bytes of cudalloc's handle.
struct Handle {
  char magic[8];
  std::int32_t pid;
  std::uint32_t kind;
  std::uint64_t record;  // its address in the exporter
  std::uint64_t serial;  // equal to the record's: a record reused at that address never matches
  unsigned char unused[32];
};
static_assert(sizeof(Handle) == 64);

// What the importer reads from the exporter.
struct RecordHeader {
  char magic[8];
  std::uint64_t serial;
  std::uint32_t kind;
  std::uint32_t count;     // pages
  std::uint64_t page_size;
  std::uint64_t offset;    // of the allocation from the legacy handle's base or the first page
  std::uint64_t fds;       // address of `count` ints in the exporter
  unsigned char legacy[CUDALLOC_IPC_HANDLE_BYTES];
};

struct Record {
  RecordHeader header{};
  std::vector<int> fds;
  Record() = default;
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  // An importer may still read this memory after the free: it must not match any handle.
  ~Record() {
    std::memset(header.magic, 0, sizeof header.magic);
    header.serial = 0;
  }
};

// The exporter's records, by allocation.
std::mutex g_records_mutex;
std::map<std::uintptr_t, std::vector<std::unique_ptr<Record>>>* g_records = nullptr;
std::atomic<bool> g_exported{false};
std::atomic<std::uint64_t> g_serial{1};

// The importer's open allocations: what cudaIpcCloseMemHandle of the pointer undoes.
// A handle's identity: the exporter and its record's serial (unique in that process).
using HandleKey = std::pair<std::int32_t, std::uint64_t>;
struct Opened {
  std::uint32_t kind = 0;
  void* base = nullptr;  // the legacy mapping's or the pages' base
  int refs = 0;
  HandleKey handle{};
};
// Legacy handles opened for plain records: CUDA maps a handle once per context, and several
// allocations of one segment share it, so each is opened once and counted.
using LegacyKey = std::array<unsigned char, CUDALLOC_IPC_HANDLE_BYTES>;
struct LegacyOpen {
  void* base = nullptr;
  int refs = 0;
};
std::mutex g_opened_mutex;  // guards both maps
std::map<std::uintptr_t, Opened>* g_opened = nullptr;
std::map<HandleKey, std::uintptr_t>* g_by_handle = nullptr;  // what each open handle gave
std::map<LegacyKey, LegacyOpen>* g_legacy = nullptr;

// One line on stderr, without allocating (the error path).
void say(const char* what, const char* why) {
  char line[256];
  const int n = std::snprintf(line, sizeof line, "cudalloc: %s: %s\n", what, why);
  if (n > 0) (void)!::write(2, line, static_cast<std::size_t>(n) < sizeof line ? n : sizeof line - 1);
}

bool read_remote(int pid, std::uint64_t address, void* out, std::size_t bytes) {
  iovec local{out, bytes};
  iovec remote{reinterpret_cast<void*>(address), bytes};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
}

// Fills the record of cudalloc's allocation `ptr`; false when it cannot be shared.
bool describe(void* ptr, Record& r) {
  std::memcpy(r.header.magic, kRecordMagic, sizeof kRecordMagic);
  std::size_t offset = 0;
  if (cudalloc_ipc_handle(ptr, r.header.legacy, &offset) == CUDALLOC_SUCCESS) {
    r.header.kind = kPlain;
    r.header.offset = offset;
    return true;
  }
  std::size_t page_size = 0, count = 0;
  if (cudalloc_ipc_share_pages(ptr, &page_size, &offset, nullptr, 0, &count) != CUDALLOC_SUCCESS ||
      count == 0 || count > kMaxPages) {
    return false;
  }
  r.fds.resize(count);
  if (cudalloc_ipc_share_pages(ptr, &page_size, &offset, r.fds.data(), count, &count) !=
          CUDALLOC_SUCCESS ||
      count != r.fds.size()) {  // freed and allocated again between the two calls
    return false;
  }
  r.header.kind = kPages;
  r.header.count = static_cast<std::uint32_t>(count);
  r.header.page_size = page_size;
  r.header.offset = offset;
  r.header.fds = reinterpret_cast<std::uintptr_t>(r.fds.data());
  return true;
}

// Opens the legacy handle of a plain record (once per handle; counted); its base in *base.
int open_legacy(const RecordHeader& h, unsigned flags, const LegacyIpc& legacy, void** base) {
  LegacyKey key;
  std::memcpy(key.data(), h.legacy, key.size());
  std::lock_guard lock(g_opened_mutex);
  LegacyOpen& open = (*g_legacy)[key];
  if (open.refs == 0) {
    if (const int code = legacy.open(&open.base, h.legacy, flags); code != 0) {
      g_legacy->erase(key);
      return code;
    }
  }
  ++open.refs;
  *base = open.base;
  return 0;
}

// Drops one count of the legacy mapping at `base`; closes it at the last (its code, or 0).
int release_legacy(void* base, const LegacyIpc& legacy) {  // g_opened_mutex held
  for (auto l = g_legacy->begin(); l != g_legacy->end(); ++l) {
    if (l->second.base != base) continue;
    if (--l->second.refs > 0) return 0;
    g_legacy->erase(l);
    return legacy.close(base);
  }
  return 0;
}

// Maps the pages of the record at `record_address` in process `pid`, whose header is `h`;
// their base in *base.
int open_pages(int pid, std::uint64_t record_address, const RecordHeader& h, void** base) {
  int inline_fds[64];
  std::vector<int> many;
  int* list = inline_fds;
  if (h.count > 64) {
    many.resize(h.count);
    list = many.data();
  }
  RecordHeader again{};
  // The header once more after the descriptors: the record was not freed in between (a
  // freed record is wiped), so the numbers are the ones it describes.
  if (!read_remote(pid, h.fds, list, h.count * sizeof(int)) ||
      !read_remote(pid, record_address, &again, sizeof again) || again.serial != h.serial) {
    say("cudaIpcOpenMemHandle", "the exporting process's record could not be read");
    return kMapFailed;
  }
  if (cudalloc_ipc_open_pages(pid, list, h.count, h.page_size, -1, base) != CUDALLOC_SUCCESS) {
    say("cudaIpcOpenMemHandle", cudalloc_last_error_string());
    return kMapFailed;
  }
  return 0;
}

// Maps an open record; the allocation's address in *ptr. Opening one allocation twice gives
// the same address, counted, as CUDA gives one mapping per handle.
int open_record(int pid, std::uint64_t record_address, const RecordHeader& h, unsigned flags,
                void** ptr, const LegacyIpc& legacy) {
  const HandleKey key{pid, h.serial};
  {
    std::lock_guard lock(g_opened_mutex);
    if (auto it = g_by_handle->find(key); it != g_by_handle->end()) {
      ++(*g_opened)[it->second].refs;
      *ptr = reinterpret_cast<void*>(it->second);
      return 0;
    }
  }
  void* base = nullptr;
  const int code =
      h.kind == kPlain ? open_legacy(h, flags, legacy, &base)
                       : open_pages(pid, record_address, h, &base);
  if (code != 0) return code;
  *ptr = static_cast<char*>(base) + h.offset;
  std::lock_guard lock(g_opened_mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(*ptr);
  Opened& o = (*g_opened)[at];
  if (o.refs > 0) {  // another handle of the same plain memory: one legacy count is enough
    release_legacy(base, legacy);
  } else {
    o.kind = h.kind;
    o.base = base;
    o.handle = key;
    (*g_by_handle)[key] = at;
  }
  ++o.refs;
  return 0;
}

// The 64 bytes of the handle naming `record`.
void write_handle(const Record& record, unsigned char* handle) {
  Handle h{};
  std::memcpy(h.magic, kHandleMagic, sizeof kHandleMagic);
  h.pid = static_cast<std::int32_t>(::getpid());
  h.kind = record.header.kind;
  h.record = reinterpret_cast<std::uintptr_t>(&record.header);
  h.serial = record.header.serial;
  std::memcpy(handle, &h, sizeof h);
}

}  // namespace

bool ipc_export(void* ptr, unsigned char* handle, int* code) noexcept {
  if (!enabled() || ptr == nullptr || allocator() == nullptr) return false;
  try {
    {
      // The live allocation's record, if it has one: a stable handle, as CUDA gives.
      std::lock_guard lock(g_records_mutex);
      if (g_records != nullptr) {
        auto it = g_records->find(reinterpret_cast<std::uintptr_t>(ptr));
        if (it != g_records->end() && !it->second.empty()) {
          write_handle(*it->second.back(), handle);
          *code = 0;
          return true;
        }
      }
    }
    auto record = std::make_unique<Record>();
    if (!describe(ptr, *record)) {
      // cudalloc's memory that cannot be shared (host tier, no export support), or not ours.
      if (allocator()->owner_of(ptr) == nullptr) return false;
      say("cudaIpcGetMemHandle", cudalloc_last_error_string());
      *code = 1;
      return true;
    }
    record->header.serial = g_serial.fetch_add(1);
    write_handle(*record, handle);
    {
      std::lock_guard lock(g_records_mutex);
      if (g_records == nullptr) g_records = new std::map<std::uintptr_t, std::vector<std::unique_ptr<Record>>>;
      (*g_records)[reinterpret_cast<std::uintptr_t>(ptr)].push_back(std::move(record));
    }
    g_exported.store(true, std::memory_order_release);
    *code = 0;
    return true;
  } catch (...) {
    *code = 2;  // no host memory for the record
    return true;
  }
}

bool ipc_open(const unsigned char* handle, unsigned flags, void** ptr, const LegacyIpc& legacy,
              int* code) noexcept {
  Handle h;
  std::memcpy(&h, handle, sizeof h);
  if (std::memcmp(h.magic, kHandleMagic, sizeof kHandleMagic) != 0) return false;
  if (!enabled() || allocator() == nullptr) {
    *code = kMapFailed;
    return true;
  }
  RecordHeader header{};
  if (!read_remote(h.pid, h.record, &header, sizeof header) ||
      std::memcmp(header.magic, kRecordMagic, sizeof kRecordMagic) != 0 ||
      header.serial != h.serial || header.kind != h.kind ||
      (header.kind == kPages && (header.count == 0 || header.count > kMaxPages))) {
    say("cudaIpcOpenMemHandle",
        "the exporting process is gone, freed the memory, or may not be read (ptrace access)");
    *code = kMapFailed;
    return true;
  }
  try {
    {
      std::lock_guard lock(g_opened_mutex);
      if (g_opened == nullptr) {
        g_opened = new std::map<std::uintptr_t, Opened>;
        g_legacy = new std::map<LegacyKey, LegacyOpen>;
        g_by_handle = new std::map<HandleKey, std::uintptr_t>;
      }
    }
    *code = open_record(h.pid, h.record, header, flags, ptr, legacy);
  } catch (...) {
    *code = 2;
  }
  return true;
}

bool ipc_close(void* ptr, const LegacyIpc& legacy, int* code) noexcept {
  std::lock_guard lock(g_opened_mutex);
  if (g_opened == nullptr) return false;
  auto it = g_opened->find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == g_opened->end()) return false;
  *code = 0;
  if (--it->second.refs > 0) return true;
  const Opened o = it->second;
  g_opened->erase(it);
  g_by_handle->erase(o.handle);
  if (o.kind == kPages) {
    if (cudalloc_ipc_close_pages(o.base) != CUDALLOC_SUCCESS) *code = 1;
    return true;
  }
  *code = release_legacy(o.base, legacy);
  return true;
}

void ipc_forget(void* ptr) noexcept {
  if (!g_exported.load(std::memory_order_acquire)) return;
  std::lock_guard lock(g_records_mutex);
  g_records->erase(reinterpret_cast<std::uintptr_t>(ptr));
}

void ipc_forget_all() noexcept {
  if (!g_exported.load(std::memory_order_acquire)) return;
  std::lock_guard lock(g_records_mutex);
  g_records->clear();
}

}  // namespace cudalloc::interpose
