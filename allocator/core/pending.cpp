// Frees that must wait for other streams (record_stream). At free time an event is recorded on
// every stream that used the allocation; the memory stays active (not reusable) until all of
// those events have completed. Completion is checked at the start of each allocation while
// frees are pending, and waited for on the OOM path and in empty_cache.
#include "core/device_allocator.h"
#include "core/log.h"

namespace cudalloc {

Error DeviceAllocator::take_event(EventHandle* event) {
  if (!idle_events_.empty()) {
    *event = idle_events_.back();
    idle_events_.pop_back();
    return Error::ok;
  }
  const auto status = device_.event_create(ordinal_, event);
  if (status == device::Status::ok) return Error::ok;
  return fail(Error::device_error, "device %d: creating an event failed: %s %s", ordinal_,
              device::status_name(status), device_.last_failure());
}

void DeviceAllocator::give_event(EventHandle event) { idle_events_.push_back(event); }

Error DeviceAllocator::defer_free(const LiveEntry& entry, StreamHandle alloc_stream,
                                  const std::vector<StreamHandle>& uses) {
  PendingFree pending;
  pending.owner = entry.owner & ~kHasStreamUses;
  pending.addr = entry.key;
  pending.requested = entry.requested;
  bool recorded_all = true;
  for (StreamHandle stream : uses) {
    if (stream == alloc_stream) continue;
    EventHandle event = 0;
    if (take_event(&event) != Error::ok ||
        device_.event_record(ordinal_, event, stream) != device::Status::ok) {
      if (event != 0) give_event(event);
      recorded_all = false;
      break;
    }
    pending.events.push_back(event);
  }
  if (!recorded_all) {
    // Without events the only safe order is a full device synchronization.
    log().debug("device {}: event for a pending free failed; synchronizing", ordinal_);
    for (EventHandle e : pending.events) give_event(e);
    pending.events.clear();
    if (device_.synchronize(ordinal_) == device::Status::ok) {
      complete_free(pending.owner, pending.addr, pending.requested);
      return Error::ok;
    }
    pending.needs_device_sync = true;
  }
  if (!(pending.owner & kSlabTag)) {
    reinterpret_cast<Block*>(pending.owner)->state = Block::State::pending;
  }
  stats_.pending_frees.count();
  pending_.push_back(std::move(pending));
  return Error::ok;
}

void DeviceAllocator::process_pending(bool wait) {
  for (std::size_t i = 0; i < pending_.size();) {
    PendingFree& p = pending_[i];
    bool done = true;
    for (EventHandle e : p.events) {
      if (p.needs_device_sync) break;
      const auto status = wait ? device_.event_synchronize(e) : device_.event_query(e);
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
      // stays out of use. Without `wait`, one attempt per allocation is enough.
      done = device_.synchronize(ordinal_) == device::Status::ok;
    }
    if (!done) {
      ++i;
      continue;
    }
    for (EventHandle e : p.events) give_event(e);
    complete_free(p.owner, p.addr, p.requested);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

}  // namespace cudalloc

namespace cudalloc {

void DeviceAllocator::defer_until_device_idle(const LiveEntry& entry) {
  // With no stream but the default ones, later work is already ordered after the free's
  // (the legacy default stream orders against every blocking stream; per-thread default
  // streams of different threads are the one case this cannot see): reuse at once.
  if (fence_streams_.empty()) {
    complete_free(entry.owner & ~kHasStreamUses, entry.key, entry.requested);
    return;
  }
  PendingFree pending;
  pending.owner = entry.owner & ~kHasStreamUses;
  pending.addr = entry.key;
  pending.requested = entry.requested;
  if (!(pending.owner & kSlabTag)) {
    reinterpret_cast<Block*>(pending.owner)->state = Block::State::pending;
  }
  stats_.pending_frees.count();
  unfenced_.push_back(std::move(pending));
}

bool DeviceAllocator::order_streams_after_now(const std::vector<StreamHandle>& waiters) {
  // Gather, then scatter, through the legacy default stream: it waits for an event recorded
  // now on every registered stream (and is itself ordered after every blocking stream's
  // earlier work); one event recorded on it after those waits then orders each waiter after
  // all of them. 2 x streams calls, not streams squared: PyTorch alone registers dozens.
  bool ordered = true;
  auto wait_on = [&](StreamHandle source, StreamHandle waiter) {
    EventHandle event = 0;
    ordered = take_event(&event) == Error::ok &&
              device_.event_record(ordinal_, event, source) == device::Status::ok &&
              device_.stream_wait_event(ordinal_, waiter, event) == device::Status::ok;
    // A wait takes the event's state when it is queued: the event can be recorded again.
    if (event != 0) give_event(event);
  };
  for (std::size_t i = 0; ordered && i < fence_streams_.size(); ++i) {
    if (fence_streams_[i] != 0) wait_on(fence_streams_[i], 0);
  }
  EventHandle hub = 0;
  if (ordered) {
    ordered = take_event(&hub) == Error::ok &&
              device_.event_record(ordinal_, hub, 0) == device::Status::ok;
  }
  for (std::size_t i = 0; ordered && i < waiters.size(); ++i) {
    if (waiters[i] != 0) {
      ordered = device_.stream_wait_event(ordinal_, waiters[i], hub) == device::Status::ok;
    }
  }
  if (hub != 0) give_event(hub);
  if (!ordered) {
    log().debug("device {}: ordering streams failed; synchronizing", ordinal_);
    ordered = device_.synchronize(ordinal_) == device::Status::ok;
  }
  return ordered;
}

void DeviceAllocator::fence_device_ordered_frees() {
  if (unfenced_.empty()) return;
  // Without registered streams there is nothing to order: see defer_until_device_idle.
  if (!fence_streams_.empty()) {
    std::vector<StreamHandle> waiters = fence_streams_;
    waiters.push_back(0);
    if (!order_streams_after_now(waiters)) return;  // nothing is ordered: keep waiting
  }
  for (PendingFree& p : unfenced_) complete_free(p.owner, p.addr, p.requested);
  unfenced_.clear();
}

void DeviceAllocator::complete_device_ordered_frees() {
  if (unfenced_.empty()) return;
  // Everything queued so far finishes; if the device cannot say so, nothing completes.
  if (device_.synchronize(ordinal_) != device::Status::ok) return;
  for (PendingFree& p : unfenced_) complete_free(p.owner, p.addr, p.requested);
  unfenced_.clear();
}

}  // namespace cudalloc
