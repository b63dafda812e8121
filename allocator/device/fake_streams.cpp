// FakeDevice: simulated streams, events, faults and the test controls.
#include <algorithm>
#include <cstring>

#include "device/fake_device.h"

namespace cudalloc::device {
namespace {
thread_local int t_current_device = 0;  // shared by all FakeDevice objects of the process
}  // namespace

FakeDevice::StreamState& FakeDevice::stream_state(int dev, StreamHandle stream) {
  return streams_[StreamKey{dev, stream}];
}

void FakeDevice::complete_stream(const StreamKey& key, std::uint64_t upto) {
  // A stream cannot run work queued after a wait before the work it waits on.
  for (const auto& dep : streams_[key].waits_on) {
    if (dep.after < upto && streams_[dep.on].completed < dep.until) {
      complete_stream(dep.on, dep.until);
    }
  }
  StreamState& s = streams_[key];
  s.completed = std::max(s.completed, std::min(upto, s.queued));
  std::erase_if(s.waits_on, [&](const auto& dep) { return dep.after < s.completed; });
  run_completed_copies();
}

bool FakeDevice::orders_with_legacy(const StreamKey& key) const {
  if (blocking_.empty()) return false;
  if (key.stream == 0) return true;
  return std::any_of(blocking_.begin(), blocking_.end(), [&](const StreamKey& b) {
    return b.dev == key.dev && b.stream == key.stream;
  });
}

std::uint64_t FakeDevice::queue_operation(const StreamKey& key) {
  // The legacy stream's implicit ordering, as dependencies of the operation queued now: on
  // the legacy stream, after each blocking stream's queued work; on a blocking stream, after
  // the legacy stream's (which carries its own dependencies on the others).
  if (options_.manual_streams && orders_with_legacy(key)) {
    auto depend_on = [&](const StreamKey& on) {
      StreamState& target = streams_[on];
      if (target.completed >= target.queued) return;
      StreamState& s = streams_[key];
      s.waits_on.push_back(StreamState::Dependency{s.queued, on, target.queued});
    };
    if (key.stream == 0) {
      for (const StreamKey& b : blocking_) {
        if (b.dev == key.dev) depend_on(b);
      }
    } else {
      depend_on(StreamKey{key.dev, 0});
    }
  }
  StreamState& s = streams_[key];
  ++s.queued;
  if (!options_.manual_streams) s.completed = s.queued;
  return s.queued;
}

void FakeDevice::set_blocking(int dev, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (stream != 0 && !orders_with_legacy(StreamKey{dev, stream})) {
    blocking_.push_back(StreamKey{dev, stream});
  }
}

void FakeDevice::run_completed_copies() {
  std::erase_if(copies_, [&](const PendingCopy& c) {
    if (streams_[c.stream].completed < c.seq) return false;
    if (c.src == 0 && range_backed(c.dst, c.bytes)) {  // zero()
      if (options_.backing) std::memset(reinterpret_cast<void*>(c.dst), 0, c.bytes);
    } else if (range_backed(c.src, c.bytes) && range_backed(c.dst, c.bytes)) {
      if (!options_.backing) return true;  // records only: nothing to move
      std::memmove(reinterpret_cast<void*>(c.dst), reinterpret_cast<const void*>(c.src),
                   c.bytes);
    } else {
      ++bad_copies_;
    }
    return true;
  });
}

Status FakeDevice::copy(int dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
                        StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::copy); s != Status::ok) return s;
  if (!valid_device(dev) || bytes == 0) return Status::invalid_value;
  if (!range_backed(src, bytes) || !range_backed(dst, bytes)) return Status::invalid_value;
  const StreamKey key{dev, stream};
  copies_.push_back(PendingCopy{key, queue_operation(key), dst, src, bytes});
  run_completed_copies();
  return Status::ok;
}

Status FakeDevice::zero(int dev, std::uintptr_t dst, std::size_t bytes, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::zero); s != Status::ok) return s;
  if (!valid_device(dev) || bytes == 0 || !range_backed(dst, bytes)) return Status::invalid_value;
  const StreamKey key{dev, stream};
  copies_.push_back(PendingCopy{key, queue_operation(key), dst, 0, bytes});  // src 0: zero
  run_completed_copies();
  return Status::ok;
}

bool FakeDevice::event_done(const EventState& e) {
  if (!e.recorded) return true;  // as in CUDA, an event never recorded counts as complete
  return streams_[e.stream].completed >= e.seq;
}

Status FakeDevice::event_create(int dev, EventHandle* event) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::event_create); s != Status::ok) return s;
  if (!valid_device(dev)) return Status::invalid_value;
  const EventHandle h = next_event_++;
  events_[h] = EventState{dev, false, {}, 0};
  *event = h;
  return Status::ok;
}

Status FakeDevice::event_destroy(EventHandle event) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::event_destroy); s != Status::ok) return s;
  return events_.erase(event) == 1 ? Status::ok : Status::invalid_value;
}

Status FakeDevice::event_record(int dev, EventHandle event, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::event_record); s != Status::ok) return s;
  auto it = events_.find(event);
  if (it == events_.end() || it->second.dev != dev) return Status::invalid_value;
  const StreamKey key{dev, stream};
  it->second.recorded = true;
  it->second.stream = key;
  // Recorded on the legacy or a blocking stream, the record is an operation with the legacy
  // stream's ordering; elsewhere it marks the work queued so far.
  it->second.seq = orders_with_legacy(key) ? queue_operation(key) : stream_state(dev, stream).queued;
  return Status::ok;
}

Status FakeDevice::event_query(EventHandle event) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::event_query); s != Status::ok) return s;
  auto it = events_.find(event);
  if (it == events_.end()) return Status::invalid_value;
  return event_done(it->second) ? Status::ok : Status::not_ready;
}

Status FakeDevice::event_synchronize(EventHandle event) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::event_synchronize); s != Status::ok) return s;
  auto it = events_.find(event);
  if (it == events_.end()) return Status::invalid_value;
  if (capture_violated(&it->second.stream)) return Status::device_error;
  // Waiting on the host lets the simulated device run the stream up to the event.
  if (!event_done(it->second)) complete_stream(it->second.stream, it->second.seq);
  return Status::ok;
}

Status FakeDevice::stream_wait_event(int dev, StreamHandle stream, EventHandle event) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::stream_wait_event); s != Status::ok) return s;
  auto it = events_.find(event);
  if (it == events_.end() || !valid_device(dev)) return Status::invalid_value;
  const StreamKey waiter_key{dev, stream};
  if (capture_violated(&waiter_key)) return Status::device_error;
  const EventState& e = it->second;
  if (!e.recorded) return Status::ok;
  waits_.push_back(Wait{dev, stream, e.stream.stream, e.seq, e.stream.dev});
  if (!event_done(e)) {
    StreamState& waiter = stream_state(dev, stream);
    waiter.waits_on.push_back(StreamState::Dependency{waiter.queued, e.stream, e.seq});
  }
  return Status::ok;
}

Status FakeDevice::synchronize(int dev) {
  std::lock_guard lock(mutex_);
  if (Status s = check_fault(CallKind::synchronize); s != Status::ok) return s;
  if (!valid_device(dev)) return Status::invalid_value;
  if (capture_violated(nullptr)) return Status::device_error;
  for (auto& [key, state] : streams_) {
    if (key.dev == dev) {
      state.completed = state.queued;
      state.waits_on.clear();
    }
  }
  run_completed_copies();
  return Status::ok;
}

void FakeDevice::set_current_device(int dev) { t_current_device = dev; }

Status FakeDevice::current_device(int* dev) {
  *dev = t_current_device;
  return Status::ok;
}

void FakeDevice::set_manual_streams(bool manual) {
  std::lock_guard lock(mutex_);
  options_.manual_streams = manual;
}

void FakeDevice::enqueue_work(int dev, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  queue_operation(StreamKey{dev, stream});
}

void FakeDevice::complete_work(int dev, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  const StreamKey key{dev, stream};
  complete_stream(key, stream_state(dev, stream).queued);
}

void FakeDevice::complete_all() {
  std::lock_guard lock(mutex_);
  for (auto& [key, state] : streams_) {
    state.completed = state.queued;
    state.waits_on.clear();
  }
  run_completed_copies();
}

bool FakeDevice::stream_idle(int dev, StreamHandle stream) {
  std::lock_guard lock(mutex_);
  const StreamState& s = stream_state(dev, stream);
  return s.completed == s.queued;
}

void FakeDevice::fail_call(CallKind kind, int nth, Status status, int count) {
  std::lock_guard lock(mutex_);
  const int k = static_cast<int>(kind);
  fault_at_[k] = calls_[k] + static_cast<std::uint64_t>(std::max(nth, 1));
  fault_status_[k] = status;
  fault_count_[k] = std::max(count, 1);
}

void FakeDevice::clear_faults() {
  std::lock_guard lock(mutex_);
  std::fill(std::begin(fault_at_), std::end(fault_at_), 0);
}

std::uint64_t FakeDevice::calls(CallKind kind) const {
  std::lock_guard lock(mutex_);
  return calls_[static_cast<int>(kind)];
}

std::size_t FakeDevice::used_bytes(int dev) const {
  std::lock_guard lock(mutex_);
  return valid_device(dev) ? memory_[dev].used : 0;
}

std::size_t FakeDevice::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::vector<FakeDevice::Wait> FakeDevice::waits() const {
  std::lock_guard lock(mutex_);
  return waits_;
}

}  // namespace cudalloc::device

namespace cudalloc::device {

bool FakeDevice::capture_violated(const StreamKey* stream) {
  // Without a stream: a device-wide wait, which no capture on any stream survives.
  const bool hit = stream == nullptr ? !capturing_.empty() : capture_of(*stream) != 0;
  if (hit) ++capture_violations_;
  return hit;
}

std::uint64_t FakeDevice::capture_of(const StreamKey& stream) const {
  for (const Capture& c : capturing_) {
    if (c.stream.dev == stream.dev && c.stream.stream == stream.stream) return c.id;
  }
  return 0;
}

void FakeDevice::set_capturing(int dev, StreamHandle stream, bool capturing) {
  std::lock_guard lock(mutex_);
  std::erase_if(capturing_, [&](const Capture& c) {
    return c.stream.dev == dev && c.stream.stream == stream;
  });
  if (capturing) capturing_.push_back(Capture{StreamKey{dev, stream}, ++last_capture_id_});
}

std::uint64_t FakeDevice::capture_violations() const {
  std::lock_guard lock(mutex_);
  return capture_violations_;
}

Status FakeDevice::stream_capturing(int dev, StreamHandle stream, bool* capturing) {
  std::lock_guard lock(mutex_);
  *capturing = capture_of(StreamKey{dev, stream}) != 0;
  return Status::ok;
}

Status FakeDevice::capture_id(int dev, StreamHandle stream, std::uint64_t* id) {
  std::lock_guard lock(mutex_);
  *id = capture_of(StreamKey{dev, stream});
  return Status::ok;
}

}  // namespace cudalloc::device
