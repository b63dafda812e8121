#include "view/bands.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <vector>

#include "view/segment_map.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;
using snapshot::EventKind;

struct Band {
  std::uint64_t from = 0, to = 0, size = 0, address = 0, stream = 0;
  std::uint32_t stack = 0;
};

// The memory a band shows: bytes times the events it lives through. Ranking by area, not by
// size alone, keeps the allocations that make the picture (weights, each step's activations)
// instead of the first step's copies of the largest size.
long double area(const Band& b) { return (long double)b.size * (long double)(b.to - b.from + 1); }

// Larger area first; of equal areas the earlier. The heap's top is the band to drop first.
bool keeps_before(const Band& a, const Band& b) {
  const long double x = area(a), y = area(b);
  return x != y ? x > y : a.from < b.from;
}

class LargestBands {
 public:
  explicit LargestBands(std::size_t max) : max_(max) {}
  void offer(const Band& b) {
    if (max_ == 0) return;
    if (heap_.size() < max_) {
      heap_.push(b);
    } else if (keeps_before(b, heap_.top())) {
      heap_.pop();
      heap_.push(b);
    }
  }
  std::vector<Band> take() {
    std::vector<Band> out;
    for (; !heap_.empty(); heap_.pop()) out.push_back(heap_.top());
    std::sort(out.begin(), out.end(), [](const Band& a, const Band& b) {
      return a.from != b.from ? a.from < b.from : a.address < b.address;
    });
    return out;
  }

 private:
  struct Later {  // a min-heap by keeps_before
    bool operator()(const Band& a, const Band& b) const { return keeps_before(a, b); }
  };
  std::size_t max_;
  std::priority_queue<Band, std::vector<Band>, Later> heap_;
};

}  // namespace

json allocation_bands_json(const snapshot::LoadedSnapshot& snap, int device,
                           std::size_t max_bands) {
  LargestBands largest(max_bands);
  std::unordered_map<std::uint64_t, Band> open;
  std::uint64_t index = 0, allocations = 0;
  for (const auto& e : snap.events) {
    if (e.device != device) continue;
    if (e.kind == EventKind::alloc) {
      ++allocations;
      if (auto it = open.find(e.addr); it != open.end()) {  // its free was never seen
        it->second.to = index;
        largest.offer(it->second);
      }
      open[e.addr] = {index, 0, e.size, e.addr, e.stream, e.stack};
    } else if (e.kind == EventKind::free_completed) {
      if (auto it = open.find(e.addr); it != open.end()) {
        it->second.to = index;
        largest.offer(it->second);
        open.erase(it);
      }
    }
    ++index;
  }
  for (auto& [address, band] : open) {
    band.to = index;
    largest.offer(band);
  }
  json bands = json::array();
  for (const Band& b : largest.take()) {
    const json* frames = b.stack > 0 && b.stack <= snap.stacks.size() ? &snap.stacks[b.stack - 1]
                                                                      : nullptr;
    bands.push_back({{"from", b.from}, {"to", b.to}, {"size", b.size},
                     {"address", hex_address(b.address)}, {"stream", hex_address(b.stream)},
                     {"site", frames ? frames_site(*frames, 1) : ""}});
  }
  return {{"events", index}, {"allocations", allocations}, {"bands", std::move(bands)}};
}

}  // namespace cudalloc::view
