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
  return fail(Error::device_error, "device %d: creating an event failed: %s", ordinal_,
              device::status_name(status));
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
    device_.synchronize(ordinal_);
    complete_free(pending.owner, pending.addr, pending.requested);
    return Error::ok;
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
      const auto status = wait ? device_.event_synchronize(e) : device_.event_query(e);
      if (status == device::Status::not_ready) {
        done = false;
        break;
      }
      if (status != device::Status::ok) {
        device_.synchronize(ordinal_);  // an event in error: fall back to the device
        break;
      }
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

bool DeviceAllocator::record_fence(Fence* fence) {
  // The legacy default stream orders after all work of every blocking stream (including
  // per-thread default streams); non-blocking streams need events of their own.
  std::vector<StreamHandle> streams = fence_streams_;
  streams.push_back(0);
  for (StreamHandle stream : streams) {
    EventHandle event = 0;
    if (take_event(&event) != Error::ok) return false;
    if (device_.event_record(ordinal_, event, stream) != device::Status::ok) {
      give_event(event);
      return false;
    }
    fence->events.push_back(event);
  }
  return true;
}

void DeviceAllocator::advance_fences(bool wait) {
  if (wait && (!fences_.empty() || !unfenced_.empty())) {
    // Everything queued so far finishes: no fence is needed any more.
    device_.synchronize(ordinal_);
    for (Fence& fence : fences_) {
      for (EventHandle e : fence.events) give_event(e);
      for (PendingFree& p : fence.frees) unfenced_.push_back(std::move(p));
    }
    fences_.clear();
    for (PendingFree& p : unfenced_) complete_free(p.owner, p.addr, p.requested);
    unfenced_.clear();
    return;
  }
  while (!fences_.empty()) {
    Fence& oldest = fences_.front();
    bool done = true;
    for (EventHandle e : oldest.events) {
      const auto status = device_.event_query(e);
      if (status == device::Status::not_ready) {
        done = false;
        break;
      }
    }
    if (!done) break;
    for (EventHandle e : oldest.events) give_event(e);
    for (PendingFree& p : oldest.frees) complete_free(p.owner, p.addr, p.requested);
    fences_.pop_front();
  }
  // At most two fences in flight: a new one waits until the older ones have passed.
  if (unfenced_.empty() || fences_.size() >= 2) return;
  Fence fence;
  if (!record_fence(&fence)) {
    for (EventHandle e : fence.events) give_event(e);
    advance_fences(true);  // no events: fall back to waiting for the device
    return;
  }
  fence.frees = std::move(unfenced_);
  unfenced_.clear();
  fences_.push_back(std::move(fence));
}

}  // namespace cudalloc
