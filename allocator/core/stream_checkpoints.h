// StreamCheckpoints: events recorded on a stream at known page epochs, so that the host can
// wait for the work that used an idle page without waiting for everything queued since.
//
// Why: a page's mapping is removed only after the host has waited for the work queued on its
// stream up to the moment the page lost its last user (page_mapper.h, ordering rules). An
// event recorded at the time of the unmap also waits for every kernel queued after that
// moment: in a training step the host then drains the stream's whole queue, and the GPU
// idles while the host queues the next kernels. A checkpoint recorded earlier, when the page
// lost its physical page to another address (the moment a later unmap becomes likely),
// covers the same work and usually has completed by the time the unmap comes.
//
// Contract:
//   - A checkpoint of `stream` at epoch E is an event recorded on `stream` when the page epoch
//     was E. Every page of a pool of `stream` that became idle at epoch <= E had its last use
//     queued on `stream` before the record (a page becomes idle when its block is freed, after
//     the work using it was queued; uses on other streams are ordered by DeferredFrees before
//     the free completes), so once the event has completed no queued work uses such a page.
//     One free completes before its other streams' work is ordered: a free in device order
//     with only default streams, which owes one event on the legacy stream. Every entry point
//     that can reach cover() pays that event first (DeferredFrees::order_before_reuse in
//     allocate, move, promote, pause_region and resume_region), so a checkpoint recorded
//     after it on a default stream is ordered after that work too.
//   - Events of one stream complete in the order they were recorded: once one has completed,
//     every earlier checkpoint of that stream has too, and all of them are forgotten.
//   - Epochs only grow, so a checkpoint of a destroyed stream whose handle is reused never
//     covers a page of the new stream (its pages became idle after the checkpoint).
//   - Nothing is recorded on a stream being captured into a CUDA graph, nor while any capture
//     is underway: a captured record is a graph node, not a point of the stream's work.
//   - At most kPerStream checkpoints per stream; recording one more forgets the oldest, which
//     only makes a later wait wait for more (a later checkpoint covers what it covered).
// Every failure (an event that cannot be taken, recorded or waited for) leaves the caller to
// wait the slow safe way (StreamSync::wait_for). Not thread-safe: the device allocator's lock
// guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "core/stream_sync.h"

namespace cudalloc {

class StreamCheckpoints {
 public:
  static constexpr std::size_t kPerStream = 8;

  explicit StreamCheckpoints(StreamSync& sync) : sync_(sync) {}
  StreamCheckpoints(const StreamCheckpoints&) = delete;
  StreamCheckpoints& operator=(const StreamCheckpoints&) = delete;

  // Makes sure a checkpoint of `stream` covers pages that became idle at `since`: records
  // one at `now` (the current page epoch, >= since) unless the newest already covers it.
  // Does nothing while a capture is underway or when the event cannot be recorded.
  void cover(StreamHandle stream, std::uint64_t since, std::uint64_t now);

  enum class Outcome {
    none,     // no checkpoint of the stream covers `since`: nothing was waited for
    done,     // the covering checkpoint had completed already: the host did not wait
    waited,   // the host waited for the covering checkpoint
    failed,   // waiting for it failed (the checkpoints of the stream are forgotten)
  };
  // With a checkpoint of `stream` that covers pages idle since `since`: the host waits until
  // the oldest such checkpoint has completed. On done / waited, *settled is its epoch
  // (>= since): every page of the stream idle at or before it is free of queued work.
  Outcome settle(StreamHandle stream, std::uint64_t since, std::uint64_t* settled);

  // Forgets the checkpoints of `stream` (its pools are gone) or of every stream.
  void forget(StreamHandle stream) { by_stream_.erase(stream); }
  void clear() { by_stream_.clear(); }
  std::size_t count(StreamHandle stream) const;

 private:
  struct Checkpoint {
    std::uint64_t epoch;
    StreamSync::Event event;
  };
  StreamSync& sync_;
  std::unordered_map<StreamHandle, std::deque<Checkpoint>> by_stream_;
};

}  // namespace cudalloc
