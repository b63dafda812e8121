// PrivatePools: the use counts of private pools, memory that serves only the requests routed
// to it (PyTorch's CUDA-graph pools and MemPool).
//
// Contract (what CUDA graphs need):
//   - a request routed to private pool P is served only from P's memory, or from a new plain
//     segment that joins P; nothing of P ever serves a request that is not routed to P, and
//     P's memory is never returned to the driver or moved, while P has users;
//   - a free of P's memory returns it to P only (reusable by later requests routed to P, on
//     the same stream, like any stream-ordered free);
//   - P holds plain segments and best-fit blocks only (no slabs, no paged ranges): a graph
//     keeps using the addresses of blocks freed during its capture, so their physical memory
//     must stay where it is, and a block layout of plain segments can be checkpointed;
//   - when P's last user releases it, P's wholly free segments join the shared cache after
//     one device synchronization (graph launches still queued may use them), and each later
//     one as soon as its last block is freed; P is forgotten when it holds nothing.
// A request routed to P makes no stream-ordering call (no event, no stream wait), so it is
// safe while P's stream is being captured.
//
// Checkpoints (PyTorch's cudagraph trees): a checkpoint is the list of P's live allocations
// (address, block size, requested size). Restoring it frees every allocation of P that is
// live then and makes exactly the checkpoint's allocations live again at their addresses, in
// P's segments (which P never gives back while it has users, so they are still there).
// The caller guarantees that nothing queued still uses P's memory, as PyTorch's allocator
// requires (it asserts that no block has outstanding events).
//
// This object only counts; DeviceAllocator (private_pools.cpp) moves the memory. Not
// thread-safe: the device allocator's lock guards it.
#pragma once

#include <unordered_map>

#include "core/stream_pool.h"

namespace cudalloc {

struct PoolAllocation {
  std::uintptr_t addr = 0;
  std::size_t size = 0;       // the block's size
  std::size_t requested = 0;  // what was asked for
};

class PrivatePools {
 public:
  // Creates P with one user, or adds a user (a released P that still holds memory lives
  // again).
  void retain(PoolId id) { ++uses_[id]; }
  // Drops a user; true when it was the last one (P is released from then on).
  bool release(PoolId id) {
    auto it = uses_.find(id);
    if (it == uses_.end() || it->second == 0) return false;
    return --it->second == 0;
  }
  // Users of P; 0 when P is released or unknown.
  int use_count(PoolId id) const {
    auto it = uses_.find(id);
    return it == uses_.end() ? 0 : it->second;
  }
  bool known(PoolId id) const { return uses_.count(id) != 0; }
  bool released(PoolId id) const { return known(id) && use_count(id) == 0; }
  // Forgets a released P that holds no memory any more.
  void forget(PoolId id) { uses_.erase(id); }
  std::size_t size() const { return uses_.size(); }
  void clear() { uses_.clear(); }

 private:
  std::unordered_map<PoolId, int> uses_;
};

}  // namespace cudalloc
