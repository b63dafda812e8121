#include "core/stream_sync.h"

#include "core/log.h"

namespace cudalloc {

StreamSync::Event& StreamSync::Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    sync_ = other.sync_;
    handle_ = other.handle_;
    other.handle_ = 0;
  }
  return *this;
}

void StreamSync::Event::reset() {
  if (handle_ != 0) sync_->give(handle_);
  handle_ = 0;
}

void StreamSync::give(EventHandle event) noexcept {
  try {
    idle_.push_back(event);
  } catch (const std::bad_alloc&) {
    device_.event_destroy(event);
  }
}

Error StreamSync::take(Event* out) {
  if (!idle_.empty()) {
    *out = Event(this, idle_.back());
    idle_.pop_back();
    return Error::ok;
  }
  EventHandle handle = 0;
  const auto status = device_.event_create(ordinal_, &handle);
  if (status != device::Status::ok) {
    return fail(Error::device_error, "device %d: creating an event failed: %s %s", ordinal_,
                device::status_name(status), device_.last_failure());
  }
  *out = Event(this, handle);
  return Error::ok;
}

bool StreamSync::capturing(StreamHandle stream) {
  bool capturing = false;
  return device_.stream_capturing(ordinal_, stream, &capturing) == device::Status::ok &&
         capturing;
}

bool StreamSync::record(StreamHandle stream, Event* out) {
  Event event;
  if (take(&event) != Error::ok ||
      device_.event_record(ordinal_, event.handle(), stream) != device::Status::ok) {
    return false;
  }
  *out = std::move(event);
  return true;
}

void StreamSync::order_after(StreamHandle earlier, StreamHandle later) {
  // The event is recorded now, after all work queued on `earlier` so far, which includes
  // every use of memory freed on it (frees happen after their uses are queued).
  Event event;
  if (record(earlier, &event)) {
    const auto done = device_.event_query(event.handle());
    if (done == device::Status::ok) return;
    if (done == device::Status::not_ready &&
        device_.stream_wait_event(ordinal_, later, event.handle()) == device::Status::ok) {
      return;
    }
  }
  // Without a usable event (a destroyed stream, a device error) wait for the whole device.
  log().debug("device {}: ordering streams through a device synchronization", ordinal_);
  device_.synchronize(ordinal_);
}

Error StreamSync::wait_for(StreamHandle stream, bool* whole_device) {
  Event event;
  if (record(stream, &event) &&
      device_.event_synchronize(event.handle()) == device::Status::ok) {
    return Error::ok;
  }
  // A destroyed stream or an event error: wait for the whole device instead.
  if (whole_device != nullptr) *whole_device = true;
  if (synchronize_device()) return Error::ok;
  return fail(Error::device_error, "device %d: waiting for a stream failed: %s", ordinal_,
              device_.last_failure());
}

bool StreamSync::fence(std::span<const StreamHandle> sources,
                       std::span<const StreamHandle> waiters) {
  // Gather, then scatter, through the legacy default stream: it waits for an event recorded
  // now on every source (and is itself ordered after every blocking stream's earlier work);
  // one event recorded on it after those waits then orders each waiter after all of them.
  // 2 x streams calls, not streams squared: PyTorch alone registers dozens.
  bool ordered = true;
  for (std::size_t i = 0; ordered && i < sources.size(); ++i) {
    if (sources[i] == 0) continue;
    Event event;
    // A wait takes the event's state when it is queued: the event can be recorded again.
    ordered = record(sources[i], &event) &&
              device_.stream_wait_event(ordinal_, 0, event.handle()) == device::Status::ok;
  }
  Event hub;
  if (ordered) ordered = record(0, &hub);
  for (std::size_t i = 0; ordered && i < waiters.size(); ++i) {
    if (waiters[i] != 0) {
      ordered = device_.stream_wait_event(ordinal_, waiters[i], hub.handle()) ==
                device::Status::ok;
    }
  }
  if (!ordered) {
    log().debug("device {}: ordering streams failed; synchronizing", ordinal_);
    ordered = synchronize_device();
  }
  return ordered;
}

bool StreamSync::synchronize_device() {
  return device_.synchronize(ordinal_) == device::Status::ok;
}

device::Status StreamSync::completed(const Event& event, Wait wait) {
  return wait == Wait::block ? device_.event_synchronize(event.handle())
                             : device_.event_query(event.handle());
}

void StreamSync::destroy_idle_events() {
  for (EventHandle e : idle_) device_.event_destroy(e);
  idle_.clear();
}

}  // namespace cudalloc
