#include "core/parked_pages.h"

#include <algorithm>
#include <iterator>

namespace cudalloc {

void ParkedPages::link_after(ParkedRun* at, ParkedRun* run) {
  run->older = at;
  run->newer = at != nullptr ? at->newer : oldest_;
  (run->older != nullptr ? run->older->newer : oldest_) = run;
  (run->newer != nullptr ? run->newer->older : newest_) = run;
}

void ParkedPages::unlink(ParkedRun* run) {
  (run->older != nullptr ? run->older->newer : oldest_) = run->newer;
  (run->newer != nullptr ? run->newer->older : newest_) = run->older;
  run->older = run->newer = nullptr;
}

ParkedPages::Runs::iterator ParkedPages::insert(Segment& seg, std::size_t first,
                                                std::size_t count, std::uint64_t epoch) {
  const ParkedRun run{&seg, first, count, epoch, nullptr, nullptr};
  if (spare_.empty()) return seg.parked.emplace(first, run).first;
  Runs::node_type node = std::move(spare_.back());
  spare_.pop_back();
  node.key() = first;
  node.mapped() = run;
  return seg.parked.insert(std::move(node)).position;
}

void ParkedPages::recycle(Segment& seg, Runs::iterator it) {
  spare_.push_back(seg.parked.extract(it));
}

void ParkedPages::park(Segment& seg, std::size_t first, std::size_t last, std::uint64_t epoch) {
  const std::size_t n = last - first + 1;
  auto it = insert(seg, first, n, epoch);
  link_after(newest_, &it->second);  // the newest epochs: the end of the list
  count_ += n;
}

ParkedPages::Runs::iterator ParkedPages::cut(Segment& seg, Runs::iterator it, std::size_t lo,
                                             std::size_t hi) {
  ParkedRun& run = it->second;
  const std::size_t first = run.first, last = run.last();
  count_ -= hi - lo + 1;
  if (lo == first && hi == last) {
    unlink(&run);
    auto next = std::next(it);
    recycle(seg, it);
    return next;
  }
  if (lo == first) {  // the run keeps its tail: re-key the same node (its address is stable)
    Runs::node_type node = seg.parked.extract(it);
    node.key() = hi + 1;
    node.mapped().first = hi + 1;
    node.mapped().count = last - hi;
    node.mapped().epoch += hi + 1 - first;
    return seg.parked.insert(std::move(node)).position;
  }
  run.count = lo - first;  // the run keeps its head
  if (hi == last) return std::next(it);
  // The middle goes: the tail becomes a run of its own, next to the head in epoch order.
  auto tail = insert(seg, hi + 1, last - hi, run.epoch + (hi + 1 - first));
  link_after(&run, &tail->second);
  return tail;
}

bool ParkedPages::take_first_in(Segment& seg, std::size_t from, std::size_t to,
                                std::size_t* lo, std::size_t* hi) {
  auto it = seg.parked.upper_bound(from);
  if (it != seg.parked.begin() && std::prev(it)->second.last() >= from) --it;
  if (it == seg.parked.end() || it->first > to) return false;
  *lo = std::max(from, it->first);
  *hi = std::min(to, it->second.last());
  cut(seg, it, *lo, *hi);
  return true;
}

Page* ParkedPages::take_oldest(std::uint64_t* epoch) {
  Segment& seg = *oldest_->segment;
  const std::size_t i = oldest_->first;
  *epoch = oldest_->epoch;
  cut(seg, seg.parked.find(i), i, i);
  return &seg.pages[i];
}

Page* ParkedPages::take_newest(std::uint64_t* epoch) {
  Segment& seg = *newest_->segment;
  const std::size_t i = newest_->last();
  *epoch = newest_->epoch + newest_->count - 1;
  auto it = seg.parked.find(newest_->first);
  cut(seg, it, i, i);
  return &seg.pages[i];
}

bool ParkedPages::contains(const Page& page) const {
  const Segment& seg = *page.segment;
  if (seg.parked.empty()) return false;
  const auto i = static_cast<std::size_t>(&page - seg.pages.data());
  auto it = seg.parked.upper_bound(i);
  return it != seg.parked.begin() && std::prev(it)->second.last() >= i;
}

bool ParkedPages::take_page(Page& page, std::uint64_t* epoch) {
  if (!contains(page)) return false;
  Segment& seg = *page.segment;
  const auto i = static_cast<std::size_t>(&page - seg.pages.data());
  auto it = std::prev(seg.parked.upper_bound(i));
  *epoch = it->second.epoch + (i - it->first);
  cut(seg, it, i, i);
  return true;
}

void ParkedPages::forget(Segment& seg) {
  for (auto& [first, run] : seg.parked) {
    count_ -= run.count;
    unlink(&run);
  }
  seg.parked.clear();
}

}  // namespace cudalloc
