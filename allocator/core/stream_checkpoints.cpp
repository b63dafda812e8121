#include "core/stream_checkpoints.h"

#include <new>

#include "core/captures.h"

namespace cudalloc {

void StreamCheckpoints::cover(StreamHandle stream, std::uint64_t since, std::uint64_t now) {
  auto it = by_stream_.find(stream);
  if (it != by_stream_.end() && !it->second.empty() && it->second.back().epoch >= since) return;
  // Checked before every record: a capture may have begun since the last one.
  if (Captures::process().underway() || sync_.capturing(stream)) return;
  try {
    if (it == by_stream_.end()) it = by_stream_.try_emplace(stream).first;
    std::deque<Checkpoint>& list = it->second;
    Checkpoint cp{now, {}};
    if (!sync_.record(stream, &cp.event)) return;
    list.push_back(std::move(cp));
    if (list.size() > kPerStream) list.pop_front();
  } catch (const std::bad_alloc&) {
    // Without room for the record the later wait takes the slow path; the list is as before
    // (an event taken is returned by its destructor).
  }
}

StreamCheckpoints::Outcome StreamCheckpoints::settle(StreamHandle stream, std::uint64_t since,
                                                     std::uint64_t* settled) {
  auto it = by_stream_.find(stream);
  if (it == by_stream_.end()) return Outcome::none;
  std::deque<Checkpoint>& list = it->second;
  std::size_t i = 0;
  while (i < list.size() && list[i].epoch < since) ++i;
  if (i == list.size()) return Outcome::none;
  Outcome outcome = Outcome::done;
  device::Status status = sync_.completed(list[i].event, Wait::poll);
  if (status == device::Status::not_ready) {
    status = sync_.completed(list[i].event, Wait::block);
    outcome = Outcome::waited;
  }
  if (status != device::Status::ok) {
    by_stream_.erase(it);
    return Outcome::failed;
  }
  *settled = list[i].epoch;
  // Recorded earlier on the same stream: complete too.
  list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  return outcome;
}

std::size_t StreamCheckpoints::count(StreamHandle stream) const {
  auto it = by_stream_.find(stream);
  return it == by_stream_.end() ? 0 : it->second.size();
}

}  // namespace cudalloc
