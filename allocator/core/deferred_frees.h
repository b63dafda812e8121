// DeferredFrees: frees whose memory is not reusable at once, and the record_stream bookkeeping
// that decides it.
//
// Two kinds of wait (DeviceAllocator::FreeOrder):
//   pending   stream order with uses by other streams (record_stream): at free time an event
//             is recorded on every such stream; the memory stays active until all of them
//             have completed. poll() checks at the start of each allocation while frees are
//             pending; poll(Wait::block) waits (OOM path, empty_cache).
//   unfenced  device order (cudaFree's guarantee) while registered streams exist: the memory
//             waits until an allocation would otherwise need new memory; then fence() orders
//             every stream after all of them, GPU-side, and completes them all at once.
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
  // A free in device order: complete at once while no stream is registered (the default
  // streams' own ordering suffices), else wait for the next fence.
  void free_in_device_order(const LiveEntry& entry);

  bool has_pending() const { return !pending_.empty(); }
  bool has_unfenced() const { return !unfenced_.empty(); }
  // Completes every pending free whose events are done (Wait::block: waits for them).
  void poll(Wait wait);
  // Orders every registered stream and the default stream after the work queued so far and
  // completes every unfenced free; nothing changes if nothing could be ordered.
  void fence();
  // Completes every unfenced free after a device synchronization (OOM path, empty_cache).
  void complete_after_device_sync();

  // Streams created by the program that device-ordered frees are ordered against. A new
  // stream is made to wait for all work queued so far.
  void register_stream(StreamHandle stream);
  void unregister_stream(StreamHandle stream);
  bool streams_registered() const { return !fence_streams_.empty(); }

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
  std::vector<StreamHandle> fence_streams_;
  std::unordered_map<std::uintptr_t, std::vector<StreamHandle>> stream_uses_;
};

}  // namespace cudalloc
