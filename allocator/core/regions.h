// Regions: memory that sleeps and wakes by tag (RL colocation: a trainer and an inference
// engine hand one GPU back and forth).
//
// A region (region_tags.h names them) owns private pools (private_pools.h): its own, which
// serves a thread's allocations while the region is current, and every private pool created
// while it is current (a CUDA graph's, a MemPool). Its memory obeys the private-pool contract
// (nothing of it serves a request routed elsewhere, and it never moves while it has users)
// and, in paged mode, lies in held segments: paged segments whose pages are all mapped while
// the segment lives (Segment::held; no page is parked, unmapped or lent to another address),
// so a graph that replays into blocks freed during its capture finds them where they were.
//
// pause(keep) and resume are the only operations that change a held segment's backing:
//   pause   waits for the work that used the region (its pools' streams and the streams its
//           live blocks were recorded on; the whole device when streams may be unseen or a
//           CUDA graph's pool belongs to it, whose replays run on any stream), then
//           per segment either moves every page to a host-located page at the same address
//           (keep: kernels still read and write it, over the bus) or unmaps it (drop: a kernel
//           that touches it faults with an illegal address, which CUDA reports as an error),
//           and returns each device page it left to the driver: device free memory rises by
//           the region's size, and the virtual ranges stay reserved;
//   resume  waits, as pause does, for the work queued on the region while it was paused
//           (kernels read and write a kept region over the bus, and its pages are remapped
//           under them), then maps device pages at the same addresses again, copies kept
//           bytes back and zeroes dropped ones, so a dropped region never shows stale bytes;
//           captured graphs replay unchanged. The host pages it left stay cached (idle, within host_limit),
//           so that the next pause pins no memory; empty_cache returns them.
// While paused, a request routed to the region fails (invalid_value), frees are accepted,
// and promotion, offload and prefetch leave the region alone. keep checks host_limit for the
// whole region first: pause fails before changing anything when the host has no room.
// A failure part way leaves every page on its old or its new backing with its bytes (the
// migrator's guarantee); the region is then paused only if some page was dropped: after a
// failed keep pause may be repeated, after a failed drop or resume, resume.
//
// This object only records tags, states and which pools are whose; DeviceAllocator
// (regions.cpp) moves the memory. Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <unordered_map>
#include <vector>

#include "core/region_tags.h"
#include "core/stream_pool.h"

namespace cudalloc {

class Regions {
 public:
  // Private pool ids of the regions' own pools: this bit and the region id (captures use bit
  // 63, PyTorch's pool ids stay far below).
  static constexpr PoolId kRegionPools = PoolId{1} << 62;
  static PoolId own_pool(RegionId id) { return kRegionPools | id; }

  enum class State : std::uint8_t { active, paused };
  struct Region {
    State state = State::active;
    bool kept = false;  // paused with its bytes on the host
    // Whether the pause knew every stream that uses the region; resume waits the same way.
    bool streams_known = true;
  };

  // The region of private pool `pool`, or kNoRegion.
  RegionId region_of(PoolId pool) const {
    auto it = pools_.find(pool);
    return it == pools_.end() ? kNoRegion : it->second;
  }
  // Makes `pool` a pool of `id` (a new private pool created while `id` is current).
  void add_pool(PoolId pool, RegionId id) {
    pools_[pool] = id;
    regions_.try_emplace(id);
  }
  void remove_pool(PoolId pool) { pools_.erase(pool); }
  bool known(RegionId id) const { return regions_.count(id) != 0; }
  const Region* find(RegionId id) const {
    auto it = regions_.find(id);
    return it == regions_.end() ? nullptr : &it->second;
  }
  Region& get(RegionId id) { return regions_[id]; }
  bool paused(RegionId id) const {
    const Region* r = find(id);
    return r != nullptr && r->state == State::paused;
  }
  // The pools of region `id`.
  std::vector<PoolId> pools_of(RegionId id) const {
    std::vector<PoolId> out;
    for (const auto& [pool, region] : pools_) {
      if (region == id) out.push_back(pool);
    }
    return out;
  }
  std::vector<RegionId> ids() const {
    std::vector<RegionId> out;
    for (const auto& [id, region] : regions_) out.push_back(id);
    return out;
  }
  void clear() {
    pools_.clear();
    regions_.clear();
  }

 private:
  std::unordered_map<PoolId, RegionId> pools_;
  std::unordered_map<RegionId, Region> regions_;
};

}  // namespace cudalloc
