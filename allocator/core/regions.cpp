// DeviceAllocator's regions (regions.h): routing by the current tag, pause, resume, residency
// and the release of held segments.
#include <algorithm>
#include <chrono>

#include "core/call_profile.h"
#include "core/device_allocator.h"
#include "core/log.h"
#include "util/units.h"

namespace cudalloc {

using device::Location;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

void DeviceAllocator::tag_new_pool(PoolId id) {
  if (const RegionId region = RegionTags::current(); region != kNoRegion) {
    regions_.add_pool(id, region);
  }
}

PoolId DeviceAllocator::route_to_region(PoolId pool) {
  const RegionId region = RegionTags::current();
  if (pool != kSharedPool || region == kNoRegion) return pool;
  const PoolId own = Regions::own_pool(region);
  if (!private_.known(own)) {
    private_.retain(own);  // never released: a region lives as long as the process
    regions_.add_pool(own, region);
  }
  return own;
}

bool DeviceAllocator::knows_region(RegionId id) const {
  std::lock_guard lock(lock_);
  return regions_.known(id);
}

bool DeviceAllocator::region_paused(RegionId id) const {
  std::lock_guard lock(lock_);
  return regions_.paused(id);
}

std::vector<Segment*> DeviceAllocator::region_segments(RegionId id) const {
  std::vector<Segment*> out;
  pools_.for_each([&](const StreamPool& pool) {
    if (pool.is_private() && regions_.region_of(pool.private_id) == id) {
      out.insert(out.end(), pool.segments.begin(), pool.segments.end());
    }
  });
  return out;
}

Error DeviceAllocator::wait_for_region(RegionId id, bool streams_known) {
  // Frees of the region still waiting for events or a fence: their streams are not all
  // known here, and one device synchronization completes them (rare: a region is freed
  // rarely while it is about to sleep).
  bool frees_waiting = false;
  deferred_.for_each([&](const PendingFree& p) {
    const Segment* seg = p.owner.segment();
    frees_waiting = frees_waiting || regions_.region_of(seg->pool->private_id) == id;
  });
  // A CUDA graph's pool is used by its replays, on whatever stream they were launched:
  // those streams are not the pool's, so only the device proves them done.
  const std::vector<PoolId> pools = regions_.pools_of(id);
  const bool graph_pools = std::any_of(pools.begin(), pools.end(),
                                       [&](PoolId p) { return p != Regions::own_pool(id); });
  if (!streams_known || frees_waiting || graph_pools) {
    if (!sync_.synchronize_device()) {
      return fail(Error::device_error, "device %d: pause: synchronizing the device failed: %s",
                  ordinal_, device_.last_failure());
    }
    deferred_.poll(Wait::poll);
    deferred_.complete_after_device_sync();
    return Error::ok;
  }
  std::vector<StreamHandle> streams;
  auto add = [&](StreamHandle s) {
    if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
  };
  pools_.for_each([&](const StreamPool& pool) {
    if (pool.is_private() && regions_.region_of(pool.private_id) == id &&
        !pool.segments.empty()) {
      add(pool.stream);
    }
  });
  live_.for_each([&](const LiveEntry& e) {
    if (regions_.region_of(e.owner.segment()->pool->private_id) != id) return;
    if (const auto* uses = deferred_.uses_of(e.key)) {
      for (StreamHandle s : *uses) add(s);
    }
  });
  for (StreamHandle s : streams) {
    if (const Error err = sync_.wait_for(s); err != Error::ok) return err;
  }
  return Error::ok;
}

Error DeviceAllocator::keep_on_host(const std::vector<Segment*>& segments) {
  // The device pages the region leaves go back to the driver as each piece is moved (idle
  // where the driver refuses).
  std::size_t released = 0;
  const CallProfile profile(device_);
  const auto start = Clock::now();
  const Error err = migrator_.move_segments(segments, Location::host,
                                            segments.front()->pool->stream, &released);
  log().debug("device {}: pause: moved to the host, {} device pages released, in {:.2f} ms{}",
              ordinal_, released, ms_since(start), profile.summary());
  return err;
}

Error DeviceAllocator::drop_pages(Segment& seg) {
  for (Page& page : seg.pages) {
    if (page.phys == nullptr) continue;
    if (const Error err = mapper_.evict(page); err != Error::ok) return err;
  }
  return Error::ok;
}

Error DeviceAllocator::rehold_dropped(Segment& seg, bool* zeroed) {
  // Dropped pages: device pages mapped again, zeroed so that no stale bytes show.
  const std::size_t page_size = mapper_.page_size();
  for (std::size_t i = 0; i < seg.pages.size();) {
    if (seg.pages[i].users != 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < seg.pages.size() && seg.pages[end].users == 0) ++end;
    const std::uintptr_t va = seg.base + i * page_size;
    const std::size_t bytes = (end - i) * page_size;
    if (const Error err = mapper_.use(seg, va, bytes, Request{}); err != Error::ok) {
      mapper_.unmap_unused(seg, i, end - i);  // a dropped page stays unmapped: a touch faults
      return err;
    }
    ledger_.page_restored(bytes);
    if (device_.zero(ordinal_, va, bytes, seg.pool->stream) != device::Status::ok) {
      // Not zeroed, so not restored: dropped again, the next resume zeroes it.
      for (std::size_t k = i; k < end; ++k) mapper_.evict(seg.pages[k]);
      return fail(Error::device_error, "device %d: resume: zeroing %s at %#zx failed: %s",
                  ordinal_, format_bytes(bytes).c_str(), static_cast<std::size_t>(va),
                  device_.last_failure());
    }
    *zeroed = true;
    i = end;
  }
  return Error::ok;
}

Error DeviceAllocator::restore_pages(const std::vector<Segment*>& segments) {
  bool zeroed = false;
  for (Segment* seg : segments) {
    if (const Error err = rehold_dropped(*seg, &zeroed); err != Error::ok) return err;
  }
  // Kept pages: back to device memory. Their host pages stay idle in the host tier's cache
  // (within host_limit): the next pause reuses them without pinning memory again, and
  // empty_cache gives them back.
  const Stats before = ledger_.stats();
  const CallProfile profile(device_);
  const auto start = Clock::now();
  const Error err = migrator_.move_segments(segments, Location::device,
                                            segments.front()->pool->stream, nullptr);
  const Stats& after = ledger_.stats();
  // Where the room came from: idle pages given back (each unmapped wherever it was mapped,
  // after a wait for its stream) cost far more than new memory.
  log().debug("device {}: resume: moved to the device in {:.2f} ms; {} device allocations given "
              "back, {} unmaps, {} host waits; mapped before: {} over {} reserved{}", ordinal_,
              ms_since(start), after.device_frees.total - before.device_frees.total,
              after.page_unmaps.total - before.page_unmaps.total,
              after.page_waits.total - before.page_waits.total,
              format_bytes(static_cast<std::size_t>(before.mapped_bytes.current)),
              format_bytes(static_cast<std::size_t>(before.reserved_bytes.current)),
              profile.summary());
  if (err != Error::ok || !zeroed) return err;
  // The zeroing is done before the caller's next work may see the memory.
  for (Segment* seg : segments) {
    if (const Error e = sync_.wait_for(seg->pool->stream); e != Error::ok) return e;
  }
  return Error::ok;
}

Error DeviceAllocator::check_pausable(const std::string& tag,
                                      const std::vector<Segment*>& segments, bool keep,
                                      const char* what) const {
  std::size_t device_pages = 0;
  for (const Segment* seg : segments) {
    if (!seg->held) {
      return fail(Error::not_supported,
                  "%s of region \"%s\": its memory is in plain segments (vmm:0); pausing "
                  "needs paged mode", what, tag.c_str());
    }
    for (const Page& page : seg->pages) {
      if (page.phys == nullptr || page.phys->host) continue;
      if (page.phys->shared_fd >= 0) {
        return fail(Error::not_supported, "%s of region \"%s\": its memory is shared "
                    "with another process (CUDA IPC)", what, tag.c_str());
      }
      ++device_pages;
    }
  }
  if (!keep || device_pages == 0) return Error::ok;
  // host_limit covers the whole region up front: nothing changes when it cannot.
  const std::size_t need = device_pages * mapper_.page_size();
  const std::size_t idle_host =
      (physical_.host_idle_list().count + physical_.idle_chunk_pages(Location::host)) *
      mapper_.page_size();
  const auto held = static_cast<std::size_t>(ledger_.stats().host_reserved_bytes.current);
  if (need > idle_host && !budget_.host_allows(held, need - idle_host)) {
    return fail(Error::out_of_memory,
                "%s of region \"%s\": keeping %s on the host would pass host_limit "
                "(%s; %s held)", what, tag.c_str(), format_bytes(need).c_str(),
                format_bytes(settings_.host_limit).c_str(), format_bytes(held).c_str());
  }
  return Error::ok;
}

Error DeviceAllocator::prepare_pause(RegionId id) {
  return metadata_guard("prepare_pause", ordinal_, [&] {
    std::lock_guard lock(lock_);
    if (!regions_.known(id)) return Error::ok;
    const std::string tag = RegionTags::name(id);
    if (regions_.paused(id)) {
      return fail(Error::invalid_value, "prepare_pause of region \"%s\": it is paused",
                  tag.c_str());
    }
    const std::vector<Segment*> segments = region_segments(id);
    if (const Error err = check_pausable(tag, segments, true, "prepare_pause");
        err != Error::ok) {
      return err;
    }
    const auto start = Clock::now();
    std::size_t pages = 0;
    const Error err = migrator_.prepare_host(segments, &pages);
    log().info("device {}: region \"{}\": {} of host memory ready for its pause{} in {:.1f} ms",
               ordinal_, tag, format_bytes(pages * mapper_.page_size()),
               err == Error::ok ? "" : " (failed)", ms_since(start));
    if (settings_.validate) check_after_operation("prepare_pause");
    return err;
  });
}

Error DeviceAllocator::pause_region(RegionId id, bool keep, bool streams_known) {
  return metadata_guard("pause", ordinal_, [&] {
    std::lock_guard lock(lock_);
    const CallProfile profile(device_);
    settle_fast_frees();  // their pages are idle memory that resume may reuse
    deferred_.order_before_reuse();  // as may memory freed in device order
    if (!regions_.known(id)) return Error::ok;
    const std::string tag = RegionTags::name(id);
    Regions::Region& region = regions_.get(id);
    if (region.state == Regions::State::paused) {
      return fail(Error::invalid_value, "pause of region \"%s\": it is paused already",
                  tag.c_str());
    }
    const std::vector<Segment*> segments = region_segments(id);
    if (const Error err = check_pausable(tag, segments, keep, "pause"); err != Error::ok) {
      return err;
    }
    const auto start = Clock::now();
    if (const Error err = wait_for_region(id, streams_known); err != Error::ok) return err;
    const double wait_ms = ms_since(start);
    // A drop that fails part way has lost bytes already: the region is paused from the start.
    if (!keep) region.state = Regions::State::paused;
    Error err = Error::ok;
    if (keep && !segments.empty()) err = keep_on_host(segments);
    for (Segment* seg : segments) {
      if (err != Error::ok || keep) break;
      err = drop_pages(*seg);
    }
    if (keep && err == Error::ok) region.state = Regions::State::paused;
    region.kept = keep;
    region.streams_known = streams_known;
    for (Segment* seg : segments) seg->paused = region.state == Regions::State::paused;
    log().info("device {}: region \"{}\" {}{} ({} segments) in {:.1f} ms ({:.1f} ms waiting "
               "for its work){}", ordinal_, tag, keep ? "kept on the host" : "dropped",
               err == Error::ok ? "" : " (failed)", segments.size(), ms_since(start), wait_ms,
               profile.summary());
    if (settings_.validate) check_after_operation("pause");
    return err;
  });
}

Error DeviceAllocator::resume_region(RegionId id) {
  return metadata_guard("resume", ordinal_, [&] {
    std::lock_guard lock(lock_);
    const CallProfile profile(device_);
    settle_fast_frees();  // their pages are idle memory that resume may reuse
    deferred_.order_before_reuse();  // as may memory freed in device order
    if (!regions_.known(id) || !regions_.paused(id)) return Error::ok;
    Regions::Region& region = regions_.get(id);
    const std::vector<Segment*> segments = region_segments(id);
    const auto start = Clock::now();
    // Kernels may still use the paused pages (kept: host-located); their pages are remapped.
    if (const Error e = wait_for_region(id, region.streams_known); e != Error::ok) return e;
    Error err = segments.empty() ? Error::ok : restore_pages(segments);
    if (err == Error::out_of_memory && (deferred_.has_pending() || deferred_.has_unfenced()) &&
        sync_.synchronize_device()) {
      // Frees waiting for their streams or a fence hold the room: once complete, their idle
      // pages serve without a driver call.
      deferred_.poll(Wait::poll);
      deferred_.complete_after_device_sync();
      err = restore_pages(segments);
    }
    if (err == Error::out_of_memory) {
      // The cache of other pools may hold the room: give it back once and retry.
      release_cached_memory();
      if (mapper_.release_cached()) blocks_.release_free_ranges();
      err = restore_pages(segments);
    }
    for (Segment* seg : segments) seg->paused = err != Error::ok;
    if (err == Error::ok) {
      region.state = Regions::State::active;
      region.kept = false;
    }
    log().info("device {}: region \"{}\" resumed{} ({} segments) in {:.1f} ms{}", ordinal_,
               RegionTags::name(id), err == Error::ok ? "" : " (failed)", segments.size(),
               ms_since(start), profile.summary());
    if (settings_.validate) check_after_operation("resume");
    return err;
  });
}

void DeviceAllocator::region_residency(RegionId id, std::size_t* device_bytes,
                                       std::size_t* host_bytes) const {
  std::lock_guard lock(lock_);
  *device_bytes = *host_bytes = 0;
  for (const Segment* seg : region_segments(id)) {
    if (!seg->paged()) {
      *device_bytes += seg->size;
      continue;
    }
    const std::size_t host = seg->host_mapped * mapper_.page_size();
    *host_bytes += host;
    *device_bytes += seg->mapped_pages * mapper_.page_size() - host;
  }
}

void DeviceAllocator::release_held_segments() {
  auto releasable = [&](const Segment* seg) {
    const PoolId id = seg->pool->private_id;
    return seg->held && !seg->paused && seg->wholly_free() &&
           (id == Regions::own_pool(regions_.region_of(id)) || private_.released(id));
  };
  std::vector<Segment*> segments;
  pools_.for_each([&](StreamPool& pool) {
    for (Segment* seg : pool.segments) {
      if (releasable(seg)) segments.push_back(seg);
    }
  });
  // Work queued before the frees may still use the memory: wait for all of it once.
  if (segments.empty() || !sync_.synchronize_device()) return;
  for (Segment* seg : segments) {
    StreamPool& pool = *seg->pool;
    const PoolId id = pool.private_id;
    seg->held = false;
    // The hold ends: pages idle (their physical pages cached for anyone), unmapped. If an
    // unmap fails the segment stays as an ordinary paged one, in the pool, until reset.
    if (!mapper_.release_hold(*seg)) continue;
    blocks_.drop_segment(pool, seg);
    if (pool.segments.empty() && private_.released(id)) forget_if_empty(id);
  }
}

}  // namespace cudalloc
