// DeferredFrees: frees whose memory is not reusable at once, and the record_stream bookkeeping
// that decides it.
//
// Two kinds of wait (DeviceAllocator::FreeOrder):
//   pending   stream order with uses by other streams (record_stream): at free time an event
//             is recorded on every such stream; the memory stays active until all of them
//             have completed. poll() checks at the start of each allocation while frees are
//             pending; poll(Wait::block) waits (OOM path, empty_cache).
//   unfenced  device order (cudaFree's guarantee): work queued on any stream before the free
//             may still use the memory. How that is proved depends on what can be seen
//             (Settings::streams):
//             all_seen         every stream is created through an interposed call (a
//                              dynamically linked runtime), except the per-thread default
//                              streams. With none created the memory is reusable at once,
//                              provided one operation on the legacy default stream comes
//                              before its next user's work: the next allocation queues one
//                              event there (order_before_reuse), which orders every blocking
//                              stream, per-thread default streams of several host threads
//                              included (they do not order each other). Otherwise fence()
//                              makes every created stream and the legacy one wait on the GPU
//                              for each other's work (StreamSync::fence), with no host wait,
//                              and a new stream waits for all older work.
//             unseen_possible  a statically linked runtime creates streams out of sight, and
//                              an event on the legacy default stream does not order
//                              non-blocking streams: nothing short of a synchronization of
//                              the whole device proves the work done. fence() synchronizes
//                              once for every free waiting; the facade calls it when the
//                              waiting frees exceed a slack, so one synchronization serves
//                              many frees, where cudaFree itself synchronizes at every call.
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
#include "core/settings.h"
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
  // Freed while one of the streams that used it was being captured into a CUDA graph: its
  // events are recorded only once no stream of `capture_uses` captures any more (waiting
  // for an event of a capturing stream, or for the device, would end the capture), as
  // PyTorch's allocator defers them to the end of the capture. Empty otherwise.
  std::vector<StreamHandle> capture_uses;
};

class DeferredFrees {
 public:
  DeferredFrees(StreamSync& sync, Ledger& ledger, FreeCompletion& pools,
                StreamVisibility streams)
      : sync_(sync), ledger_(ledger), pools_(pools), streams_(streams) {}

  // record_stream: the live allocation `entry` is used by work on `stream` too.
  void note_use(LiveEntry& entry, StreamHandle stream);
  bool has_stream_uses(std::uintptr_t addr) const { return stream_uses_.count(addr) == 1; }
  // The streams record_stream named for the live allocation at `addr`, or nullptr.
  const std::vector<StreamHandle>* uses_of(std::uintptr_t addr) const {
    auto it = stream_uses_.find(addr);
    return it == stream_uses_.end() ? nullptr : &it->second;
  }
  // Drops the record_stream uses of `addr` (a free that needs no wait: the caller knows the
  // work is done).
  void forget_uses(std::uintptr_t addr) { stream_uses_.erase(addr); }

  // A free in stream order: complete at once unless other streams used the memory.
  void free_in_stream_order(const LiveEntry& entry);
  // A free in device order: waits for the next fence (with all streams seen and none but
  // the default ones, completes at once and owes one event on the legacy stream).
  void free_in_device_order(const LiveEntry& entry);
  // Before an allocation, a move, a promotion, a pause or a resume may take memory freed in
  // device order with only default streams: the owed event on the legacy default stream
  // (nothing when none is owed; inline, as it is on every allocation). Until it is paid,
  // work queued since such a free on a stream that did not use the memory is not ordered
  // after its last users, so nothing recorded then (a page checkpoint included) may stand
  // for their completion.
  void order_before_reuse() {
    if (legacy_event_owed_) record_owed_event();
  }

  bool has_pending() const { return !pending_.empty(); }
  bool has_unfenced() const { return !unfenced_.empty(); }
  // Rounded bytes of the frees waiting for a fence.
  std::size_t unfenced_bytes() const { return unfenced_bytes_; }
  // Completes every pending free whose events are done (Wait::block: waits for them).
  void poll(Wait wait);
  // Completes every unfenced free behind a fence (see above); nothing changes when nothing
  // could be ordered.
  void fence();
  // Completes every unfenced free after a device synchronization (OOM path, empty_cache).
  void complete_after_device_sync();
  // Whether fence() synchronizes the device (unseen streams possible): then it is worth
  // calling only once enough frees wait.
  bool fence_synchronizes() const { return visibility() == StreamVisibility::unseen_possible; }

  // From now on, in every device of the process (those set up later too), streams may be
  // unseen (a CUDA runtime appeared that creates them out of sight): fences synchronize the
  // device. Frees waiting now complete at the next fence. Lock-free; one way.
  static void streams_may_be_unseen_everywhere();

  // Streams created by the program (all_seen: the fence orders them; a new one waits for the
  // work queued before it).
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
  void record_owed_event();
  PendingFree make_pending(const LiveEntry& entry);
  // Whether the allocation stream `own` or a stream of `uses` is being captured.
  bool any_capturing(const std::vector<StreamHandle>& uses, StreamHandle own);
  // For a free held for a capture: once no stream of it captures, records its events and
  // returns true; false while one still does. True for every other free.
  bool capture_over(PendingFree& p);
  // Records an event on every stream of `uses` except the allocation's own; false when one
  // could not be recorded (then `pending` holds none).
  bool record_uses(const std::vector<StreamHandle>& uses, PendingFree& pending);

  StreamSync& sync_;
  Ledger& ledger_;
  FreeCompletion& pools_;
  std::vector<PendingFree> pending_;
  void complete_unfenced();

  std::vector<PendingFree> unfenced_;
  std::size_t unfenced_bytes_ = 0;
  // streams_, unless streams_may_be_unseen_everywhere() was called.
  StreamVisibility visibility() const;
  const StreamVisibility streams_;
  std::vector<StreamHandle> fence_streams_;
  bool legacy_event_owed_ = false;  // see order_before_reuse
  std::unordered_map<std::uintptr_t, std::vector<StreamHandle>> stream_uses_;
};

}  // namespace cudalloc
