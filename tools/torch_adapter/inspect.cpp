// TorchAllocator: stats under PyTorch's names, cacheInfo, snapshots (adapter.h).
#include <cstring>
#include <string>
#include <utility>

#include "adapter.h"

namespace cudalloc::torch_adapter {
namespace {

// The index of cudalloc's stat `name` (stats_fields.h), looked up once.
int stat_index(const char* name) {
  for (int i = 0; i < cudalloc_stat_count(); ++i) {
    if (std::strcmp(cudalloc_stat_name(i), name) == 0) return i;
  }
  return -1;
}

const cudalloc_stat_t& value(const cudalloc_stats_t& s, int index) {
  static const cudalloc_stat_t zero{};
  return index < 0 || index >= s.count ? zero : s.values[index];
}

// A PyTorch Stat from a cudalloc gauge: current and peak as they are; allocated counts the
// increases and freed the decreases since the last resetAccumulatedStats (the baseline).
c10::CachingAllocator::Stat stat_of(const cudalloc_stat_t& v, const cudalloc_stat_t& b) {
  c10::CachingAllocator::Stat out;
  out.current = v.current;
  out.peak = v.peak;
  out.allocated = v.total - b.total;
  out.freed = (v.total - v.current) - (b.total - b.current);
  return out;
}

// Every pool type of PyTorch's StatArray gets the whole figure under "all" and "large_pool"
// (cudalloc's slabs are carved from large blocks); "small_pool" stays zero.
void fill(c10::CachingAllocator::StatArray& array, const c10::CachingAllocator::Stat& stat) {
  array[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = stat;
  array[static_cast<std::size_t>(c10::CachingAllocator::StatType::LARGE_POOL)] = stat;
}

// Where each PyTorch name (cudalloc_stat_torch_name: the one list of the mapping) goes in
// PyTorch's DeviceStats.
void assign(cca::DeviceStats& out, const std::string& name, const cudalloc_stat_t& v,
            const cudalloc_stat_t& b) {
  static const std::pair<const char*, c10::CachingAllocator::StatArray cca::DeviceStats::*>
      kGauges[] = {{"allocation", &cca::DeviceStats::allocation},
                   {"segment", &cca::DeviceStats::segment},
                   {"active", &cca::DeviceStats::active},
                   {"inactive_split", &cca::DeviceStats::inactive_split},
                   {"allocated_bytes", &cca::DeviceStats::allocated_bytes},
                   {"reserved_bytes", &cca::DeviceStats::reserved_bytes},
                   {"active_bytes", &cca::DeviceStats::active_bytes},
                   {"inactive_split_bytes", &cca::DeviceStats::inactive_split_bytes},
                   {"requested_bytes", &cca::DeviceStats::requested_bytes}};
  static const std::pair<const char*, int64_t cca::DeviceStats::*> kCounters[] = {
      {"num_alloc_retries", &cca::DeviceStats::num_alloc_retries},
      {"num_ooms", &cca::DeviceStats::num_ooms},
      {"num_sync_all_streams", &cca::DeviceStats::num_sync_all_streams},
      {"num_device_alloc", &cca::DeviceStats::num_device_alloc},
      {"num_device_free", &cca::DeviceStats::num_device_free}};
  for (const auto& [key, member] : kGauges) {
    if (name == key) return fill(out.*member, stat_of(v, b));
  }
  for (const auto& [key, member] : kCounters) {
    if (name == key) {
      out.*member = v.total - b.total;
      return;
    }
  }
}

}  // namespace

cca::DeviceStats TorchAllocator::getDeviceStats(c10::DeviceIndex device) {
  cca::DeviceStats out;
  cudalloc_stats_t s{};
  if (cudalloc_get_stats(device, &s) != CUDALLOC_SUCCESS) return out;
  cudalloc_stats_t base{};
  {
    std::lock_guard lock(mutex_);
    if (auto it = baselines_.find(device); it != baselines_.end()) base = it->second;
  }
  for (int i = 0; i < s.count; ++i) {
    if (const char* name = cudalloc_stat_torch_name(i, nullptr)) {
      assign(out, name, value(s, i), value(base, i));
    }
  }
  out.max_split_size = -1;  // PyTorch's "no limit"
  return out;
}

void TorchAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  cudalloc_stats_t s{};
  if (cudalloc_get_stats(device, &s) != CUDALLOC_SUCCESS) return;
  std::lock_guard lock(mutex_);
  baselines_[device] = s;
}

void TorchAllocator::resetPeakStats(c10::DeviceIndex device) {
  cudalloc_reset_peak_stats(device);
}

std::pair<size_t, size_t> TorchAllocator::getMemoryInfo(c10::DeviceIndex device) {
  std::size_t free_bytes = 0, total = 0;
  TORCH_CHECK(cudalloc_memory_info(device, &free_bytes, &total) == CUDALLOC_SUCCESS,
              "cudalloc: memory info failed: ", cudalloc_last_error_string());
  return {free_bytes, total};
}

void TorchAllocator::cacheInfo(c10::DeviceIndex device, size_t* largestBlock) {
  // As PyTorch's allocator: a zero *largestBlock asks for a first guess, the free device
  // memory; the answer is never below the largest block the cache holds.
  if (*largestBlock == 0) {
    std::size_t free_bytes = 0, total = 0;
    if (cudalloc_memory_info(device, &free_bytes, &total) == CUDALLOC_SUCCESS) {
      *largestBlock = free_bytes;
    }
  }
  std::size_t cached = 0;
  if (cudalloc_largest_free_block(device, &cached) == CUDALLOC_SUCCESS && cached > *largestBlock) {
    *largestBlock = cached;
  }
}

namespace {

// The segments and blocks of `device` (retried while the state grows between the calls).
bool read_segments(int device, std::vector<cudalloc_segment_info_t>* segments,
                   std::vector<cudalloc_block_info_t>* blocks) {
  std::size_t ns = 0, nb = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    segments->resize(ns + 8);
    blocks->resize(nb + 64);
    if (cudalloc_get_segments(device, segments->data(), segments->size(), &ns, blocks->data(),
                              blocks->size(), &nb) == CUDALLOC_SUCCESS) {
      segments->resize(ns);
      blocks->resize(nb);
      return true;
    }
  }
  return false;
}

}  // namespace

void* TorchAllocator::getBaseAllocation(void* ptr, size_t* size) {
  std::size_t on_device = 0, on_host = 0;
  if (cudalloc_residency(ptr, &on_device, &on_host) == CUDALLOC_SUCCESS && size != nullptr) {
    *size = on_device + on_host;  // cudalloc's allocations are their own base
  }
  return ptr;
}

cca::SnapshotInfo TorchAllocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  cca::SnapshotInfo out;
  const bool all_pools = mempool_id.first == 0 && mempool_id.second == 0;
  const std::uint64_t only = all_pools ? 0 : routes_.key_of(mempool_id);
  const int devices = std::max(device_count_, cudalloc_device_count());
  for (int d = 0; d < devices; ++d) {
    std::vector<cudalloc_segment_info_t> segments;
    std::vector<cudalloc_block_info_t> blocks;
    if (!read_segments(d, &segments, &blocks)) continue;
    for (const cudalloc_segment_info_t& s : segments) {
      if (!all_pools && s.pool != only) continue;
      cca::SegmentInfo info;
      info.device = static_cast<c10::DeviceIndex>(d);
      info.address = s.address;
      info.total_size = s.size;
      info.stream = s.stream;
      info.is_large = s.small == 0;
      info.is_expandable = s.paged != 0;
      info.owner_private_pool_id = routes_.id_of(s.pool);
      for (std::size_t b = s.first_block; b < s.first_block + s.block_count; ++b) {
        const cudalloc_block_info_t& blk = blocks[b];
        cca::BlockInfo bi;
        bi.size = blk.size;
        bi.requested_size = blk.requested;
        bi.allocated = blk.state == 1;
        bi.active = blk.state != 0;
        if (bi.allocated) bi.context_when_allocated = history_.context_of(blk.address);
        info.requested_size += blk.requested;
        if (bi.allocated) info.allocated_size += blk.size;
        if (bi.active) info.active_size += blk.size;
        info.blocks.push_back(std::move(bi));
      }
      out.segments.push_back(std::move(info));
    }
  }
  if (include_traces) out.device_traces = history_.traces(devices);
  else out.device_traces.resize(static_cast<std::size_t>(devices));
  out.config_metadata.garbage_collection_threshold = 0.0;
  out.config_metadata.max_split_size = std::numeric_limits<size_t>::max();
  out.config_metadata.expandable_segments = false;
  out.config_metadata.last_allocator_settings = "cudalloc";
  return out;
}

void TorchAllocator::report_to_profiler(void* ptr, std::int64_t delta, c10::DeviceIndex device) {
  cudalloc_stats_t s{};
  if (cudalloc_get_stats(device, &s) != CUDALLOC_SUCCESS) return;
  static const int allocated = stat_index("allocated_bytes");
  static const int reserved = stat_index("reserved_bytes");
  c10::reportMemoryUsageToProfiler(ptr, delta,
                                   static_cast<std::size_t>(value(s, allocated).current),
                                   static_cast<std::size_t>(value(s, reserved).current),
                                   c10::Device(c10::DeviceType::CUDA, device));
}

}  // namespace cudalloc::torch_adapter
