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

void DeviceAllocator::fence_device_ordered_frees() {
  if (unfenced_.empty()) return;
  // Events on the legacy default stream (it orders after every blocking stream, per-thread
  // default streams included) and on every registered non-blocking stream, recorded now,
  // after every use of the freed memory; then every one of those streams waits for all of
  // them. Any work queued from here on, on any stream, runs after the old uses: the memory
  // can be handed out at once, and the host never waits.
  std::vector<StreamHandle> streams = fence_streams_;
  streams.push_back(0);
  std::vector<EventHandle> events;
  bool ordered = true;
  for (StreamHandle stream : streams) {
    EventHandle event = 0;
    if (take_event(&event) != Error::ok) {
      ordered = false;
      break;
    }
    events.push_back(event);
    ordered = device_.event_record(ordinal_, event, stream) == device::Status::ok;
    if (!ordered) break;
  }
  for (std::size_t s = 0; ordered && s < streams.size(); ++s) {
    for (std::size_t e = 0; ordered && e < events.size(); ++e) {
      if (e == s) continue;  // a stream is already ordered after its own event
      ordered = device_.stream_wait_event(ordinal_, streams[s], events[e]) == device::Status::ok;
    }
  }
  if (!ordered) {
    log().debug("device {}: fence failed; synchronizing", ordinal_);
    device_.synchronize(ordinal_);
  }
  // Streams created later wait for the newest fence (which follows all older ones).
  for (EventHandle e : last_fence_) give_event(e);
  last_fence_ = ordered ? std::move(events) : std::vector<EventHandle>{};
  if (!ordered) {
    for (EventHandle e : events) give_event(e);
  }
  for (PendingFree& p : unfenced_) complete_free(p.owner, p.addr, p.requested);
  unfenced_.clear();
}

void DeviceAllocator::complete_device_ordered_frees() {
  if (unfenced_.empty()) return;
  device_.synchronize(ordinal_);  // everything queued so far finishes
  for (PendingFree& p : unfenced_) complete_free(p.owner, p.addr, p.requested);
  unfenced_.clear();
}

}  // namespace cudalloc
