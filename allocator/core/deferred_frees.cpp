#include "core/deferred_frees.h"

#include <algorithm>
#include <atomic>

#include "core/captures.h"
#include "core/log.h"

namespace cudalloc {

void DeferredFrees::note_use(LiveEntry& entry, StreamHandle stream) {
  if (stream == entry.owner.stream()) return;  // stream order covers it
  auto& uses = stream_uses_[entry.key];
  if (std::find(uses.begin(), uses.end(), stream) != uses.end()) return;
  uses.push_back(stream);
  entry.owner = entry.owner.with_stream_uses();
}

PendingFree DeferredFrees::make_pending(const LiveEntry& entry) {
  PendingFree pending;
  pending.owner = entry.owner.untagged();
  pending.addr = entry.key;
  pending.requested = entry.requested;
  return pending;
}

bool DeferredFrees::record_uses(const std::vector<StreamHandle>& uses, PendingFree& pending) {
  const StreamHandle own = pending.owner.stream();
  for (StreamHandle stream : uses) {
    if (stream == own) continue;
    StreamSync::Event event;
    if (!sync_.record(stream, &event)) {
      pending.events.clear();
      return false;
    }
    pending.events.push_back(std::move(event));
  }
  return true;
}

void DeferredFrees::free_in_stream_order(const LiveEntry& entry) {
  if (!entry.owner.has_stream_uses()) {
    pools_.complete_free(entry.owner, entry.key);
    return;
  }
  auto uses = stream_uses_.extract(entry.key);
  PendingFree pending = make_pending(entry);
  if (any_capturing(uses.mapped(), pending.owner.stream())) {
    pending.capture_uses = std::move(uses.mapped());
  } else if (!record_uses(uses.mapped(), pending)) {
    // Without events the only safe order is a full device synchronization.
    log().debug("a pending free's event failed; synchronizing the device");
    if (sync_.synchronize_device()) {
      pools_.complete_free(pending.owner, pending.addr);
      return;
    }
    pending.needs_device_sync = true;
  }
  if (!pending.owner.is_slab()) pending.owner.block()->state = Block::State::pending;
  ledger_.pending_free();
  pending_.push_back(std::move(pending));
}

namespace {
// Set once for the process (streams_may_be_unseen_everywhere): read without a lock, so that
// the interposer can set it from inside dlsym, and devices set up later see it too.
std::atomic<bool> g_unseen_everywhere{false};
}  // namespace

void DeferredFrees::streams_may_be_unseen_everywhere() {
  g_unseen_everywhere.store(true, std::memory_order_release);
}

StreamVisibility DeferredFrees::visibility() const {
  return g_unseen_everywhere.load(std::memory_order_acquire) ? StreamVisibility::unseen_possible
                                                             : streams_;
}

void DeferredFrees::free_in_device_order(const LiveEntry& entry) {
  stream_uses_.erase(entry.key);  // the fence covers every stream
  if (visibility() == StreamVisibility::all_seen && fence_streams_.empty() &&
      !Captures::process().underway()) {
    // Only default streams: the memory is reusable once one operation on the legacy default
    // stream lies between this free and the work of its next user. Per-thread default
    // streams (--default-stream per-thread, CU_STREAM_PER_THREAD) need it: no call creates
    // them, and two of them, in two host threads, do not order each other; each orders with
    // the legacy stream. The allocation that may hand the memory out queues it first
    // (order_before_reuse). Not while a graph is being captured: an operation on the legacy
    // stream would end a capture of a blocking stream with an error, so the free waits for
    // the fence after the capture (and the event owed from before it is paid as it begins).
    legacy_event_owed_ = true;
    pools_.complete_free(entry.owner.untagged(), entry.key);
    return;
  }
  PendingFree pending = make_pending(entry);
  unfenced_bytes_ += pending.owner.rounded_size();
  if (!pending.owner.is_slab()) pending.owner.block()->state = Block::State::pending;
  ledger_.pending_free();
  unfenced_.push_back(std::move(pending));
}

bool DeferredFrees::any_capturing(const std::vector<StreamHandle>& uses, StreamHandle own) {
  if (sync_.capturing(own)) return true;
  return std::any_of(uses.begin(), uses.end(),
                     [&](StreamHandle s) { return s != own && sync_.capturing(s); });
}

bool DeferredFrees::capture_over(PendingFree& p) {
  if (p.capture_uses.empty()) return true;
  if (any_capturing(p.capture_uses, p.owner.stream())) return false;
  std::vector<StreamHandle> uses = std::move(p.capture_uses);
  p.capture_uses.clear();
  if (!record_uses(uses, p)) p.needs_device_sync = true;
  return true;
}

void DeferredFrees::poll(Wait wait) {
  for (std::size_t i = 0; i < pending_.size();) {
    PendingFree& p = pending_[i];
    if (!capture_over(p)) {  // its streams still capture: nothing may wait for them yet
      ++i;
      continue;
    }
    bool done = true;
    for (const StreamSync::Event& e : p.events) {
      if (p.needs_device_sync) break;
      const auto status = sync_.completed(e, wait);
      if (status == device::Status::not_ready) {
        done = false;
        break;
      }
      if (status != device::Status::ok) {
        p.needs_device_sync = true;  // an event in error: fall back to the device
        break;
      }
    }
    if (p.needs_device_sync) {
      // Only a synchronization that succeeds proves the work done; until then the memory
      // stays out of use. Without waiting, one attempt per allocation is enough.
      done = sync_.synchronize_device();
    }
    if (!done) {
      ++i;
      continue;
    }
    PendingFree finished = std::move(p);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
    finished.events.clear();
    pools_.complete_free(finished.owner, finished.addr);
  }
}

void DeferredFrees::record_owed_event() {
  if (Captures::process().underway()) return;
  // One event on the legacy stream: it runs after the earlier work of every blocking stream,
  // and work queued later on any of them runs after it. Without it (an event that cannot be
  // recorded) the fence synchronizes the device.
  if (sync_.fence({}, {})) legacy_event_owed_ = false;
}

void DeferredFrees::fence() {
  if (unfenced_.empty()) return;
  if (fence_synchronizes()) {
    complete_after_device_sync();
    return;
  }
  // The event on the legacy default stream also orders the blocking streams nobody created.
  std::vector<StreamHandle> waiters = fence_streams_;
  waiters.push_back(0);
  if (!sync_.fence(fence_streams_, waiters)) return;  // nothing is ordered: keep waiting
  legacy_event_owed_ = false;  // the fence's event on the legacy stream is one
  complete_unfenced();
}

void DeferredFrees::complete_after_device_sync() {
  if (unfenced_.empty()) return;
  // Everything queued so far finishes; if the device cannot say so, nothing completes.
  if (!sync_.synchronize_device()) return;
  complete_unfenced();
}

void DeferredFrees::complete_unfenced() {
  ledger_.fence();
  std::vector<PendingFree> done;
  done.swap(unfenced_);
  unfenced_bytes_ = 0;
  for (PendingFree& p : done) pools_.complete_free(p.owner, p.addr);
}

void DeferredFrees::register_stream(StreamHandle stream) {
  if (visibility() != StreamVisibility::all_seen ||
      std::find(fence_streams_.begin(), fence_streams_.end(), stream) != fence_streams_.end()) {
    return;
  }
  // Memory already reused may have been freed while older work still used it: the new
  // stream starts after all of that work.
  const StreamHandle waiters[] = {stream};
  // Its hub event on the legacy stream is also the event a free may owe.
  if (sync_.fence(fence_streams_, waiters)) legacy_event_owed_ = false;
  fence_streams_.push_back(stream);
}

void DeferredFrees::unregister_stream(StreamHandle stream) { std::erase(fence_streams_, stream); }

void DeferredFrees::forget() {
  legacy_event_owed_ = false;  // the device was synchronized
  pending_.clear();
  unfenced_.clear();
  unfenced_bytes_ = 0;
  stream_uses_.clear();
}

}  // namespace cudalloc
