// StreamSync: the ordering primitives between streams of one device, over a pool of events.
//
// Every way the allocator orders work goes through here:
//   order_after  GPU-side: later work on one stream waits for the work queued on another so
//                far (memory moving from one stream to another)
//   wait_for     host-side: the host waits for the work queued on one stream so far (before a
//                page is unmapped or a live page moves)
//   fence        GPU-side, many streams: every waiter waits for the work queued so far on the
//                legacy default stream and on every source stream (device-ordered frees where
//                every stream is known)
// Each falls back to a synchronization of the whole device when an event cannot be created,
// recorded or waited on (a destroyed stream, a device error), which orders everything; a
// primitive reports failure only when that fails too, and then nothing is ordered.
//
// Events are recycled: Event is an RAII handle that returns its event to the pool when it goes
// out of scope. Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <span>
#include <vector>

#include "core/errors.h"
#include "core/request.h"
#include "device/device.h"

namespace cudalloc {

using device::EventHandle;
using device::StreamHandle;

class StreamSync {
 public:
  class Event {
   public:
    Event() = default;
    Event(Event&& other) noexcept : sync_(other.sync_), handle_(other.handle_) {
      other.handle_ = 0;
    }
    Event& operator=(Event&& other) noexcept;
    ~Event() { reset(); }
    EventHandle handle() const { return handle_; }
    explicit operator bool() const { return handle_ != 0; }
    // Returns the event to its pool now.
    void reset();

   private:
    friend class StreamSync;
    Event(StreamSync* sync, EventHandle handle) : sync_(sync), handle_(handle) {}
    StreamSync* sync_ = nullptr;
    EventHandle handle_ = 0;
  };

  StreamSync(device::Device& device, int ordinal) : device_(device), ordinal_(ordinal) {}
  ~StreamSync() { destroy_idle_events(); }
  StreamSync(const StreamSync&) = delete;
  StreamSync& operator=(const StreamSync&) = delete;

  // An event from the pool, or a new one.
  Error take(Event* out);
  // An event recorded on `stream` now; false (and nothing recorded) on failure.
  bool record(StreamHandle stream, Event* out);
  void order_after(StreamHandle earlier, StreamHandle later);
  // On failure of the event path *whole_device (when given) is set: the device was waited for.
  Error wait_for(StreamHandle stream, bool* whole_device = nullptr);
  bool fence(std::span<const StreamHandle> sources, std::span<const StreamHandle> waiters);
  // Waits for all work on the device; false on failure.
  bool synchronize_device();
  // Whether `stream` is being captured into a CUDA graph (then no event of it may be waited
  // for, and no device-wide wait may happen: it would end the capture). When the device
  // cannot say (a destroyed stream), false: the event path then fails and falls back to a
  // device synchronization, which keeps the memory out of use until one succeeds.
  bool capturing(StreamHandle stream);
  // Whether the work before `event` has completed: ok, not_ready (only without waiting), or
  // the device's error. With Wait::block the host waits for it.
  device::Status completed(const Event& event, Wait wait);

  // Destroys the pool's idle events (reset, destructor). Events in use are unaffected.
  void destroy_idle_events();
  std::size_t idle_events() const { return idle_.size(); }

 private:
  // Never throws (it runs in Event's destructor): without room in the pool the event is
  // destroyed instead.
  void give(EventHandle event) noexcept;

  device::Device& device_;
  const int ordinal_;
  std::vector<EventHandle> idle_;
};

}  // namespace cudalloc
