// DeferredFrees: frees whose memory is not reusable at once, and the record_stream bookkeeping
// that decides it.
//
// Two kinds of wait (DeviceAllocator::FreeOrder):
//   pending   stream order with uses by other streams (record_stream): at free time an event
//             is recorded on every such stream; the memory stays active until all of them
//             have completed. poll() checks at the start of each allocation while frees are
//             pending; poll(Wait::block) waits (OOM path, empty_cache).
//   unfenced  device order (cudaFree's guarantee): work queued on any stream before the free
//             may still use the memory, also on streams cudalloc never saw created (a
//             statically linked runtime creates them out of sight, and so do libraries such
//             as NCCL). An event on the legacy default stream orders only blocking streams;
//             for non-blocking ones nothing short of a synchronization of the whole device
//             proves the work done. So fence() synchronizes the device once for every free
//             waiting, and the facade calls it only when an allocation would otherwise take
//             new memory and the waiting frees hold more than a slack: one synchronization
//             serves many frees, where cudaFree itself synchronizes at every call.
// A free whose events cannot be recorded or queried waits for a successful device
// synchronization instead; until one succeeds the memory stays out of use.
//
// Completion goes back to the pools through FreeCompletion. Not thread-safe: the device
// allocator's lock guards it.
#pragma once

#include <unordered_map>
#include <vector>

#include "core/ledger.h"
#include "core/live_map.h"
#include "core/stream_sync.h"

namespace cudalloc {

class FreeCompletion {
 public:
  // The memory of the allocation `owner` at `addr` is reusable from now on.
  virtual void complete_free(Owner owner, std::uintptr_t addr) = 0;

 protected:
  ~FreeCompletion() = default;
};

struct PendingFree {
  Owner owner;  // untagged
  std::uintptr_t addr = 0;
  std::size_t requested = 0;
  std::vector<StreamSync::Event> events;
  // The events could not be recorded or queried and the fallback device synchronization
  // failed too: the free completes only after a later synchronization succeeds.
  bool needs_device_sync = false;
};

class DeferredFrees {
 public:
  DeferredFrees(StreamSync& sync, Ledger& ledger, FreeCompletion& pools)
      : sync_(sync), ledger_(ledger), pools_(pools) {}

  // record_stream: the live allocation `entry` is used by work on `stream` too.
  void note_use(LiveEntry& entry, StreamHandle stream);
  bool has_stream_uses(std::uintptr_t addr) const { return stream_uses_.count(addr) == 1; }

  // A free in stream order: complete at once unless other streams used the memory.
  void free_in_stream_order(const LiveEntry& entry);
  // A free in device order: waits for the next fence.
  void free_in_device_order(const LiveEntry& entry);

  bool has_pending() const { return !pending_.empty(); }
  bool has_unfenced() const { return !unfenced_.empty(); }
  // Rounded bytes of the frees waiting for a fence.
  std::size_t unfenced_bytes() const { return unfenced_bytes_; }
  // Completes every pending free whose events are done (Wait::block: waits for them).
  void poll(Wait wait);
  // Completes every unfenced free after one device synchronization; nothing changes when
  // the synchronization fails.
  void fence();

  template <typename F>
  void for_each(F&& f) const {
    for (const PendingFree& p : pending_) f(p);
    for (const PendingFree& p : unfenced_) f(p);
  }
  // Forgets every wait (reset: the device has been synchronized).
  void forget();

 private:
  PendingFree make_pending(const LiveEntry& entry);
  // Records an event on every stream of `uses` except the allocation's own; false when one
  // could not be recorded (then `pending` holds none).
  bool record_uses(const std::vector<StreamHandle>& uses, PendingFree& pending);

  StreamSync& sync_;
  Ledger& ledger_;
  FreeCompletion& pools_;
  std::vector<PendingFree> pending_;
  std::vector<PendingFree> unfenced_;
  std::size_t unfenced_bytes_ = 0;
  std::unordered_map<std::uintptr_t, std::vector<StreamHandle>> stream_uses_;
};

}  // namespace cudalloc
