// page-move-bench: what moving pages between device and host memory costs, call by call.
//
//   page-move-bench [PAGES [BACKGROUND]]   (default 256 pages of the device's VMM granularity;
//                                          BACKGROUND single-page allocations held meanwhile)
//   page-move-bench --create-after-release (only the last measurement below)
//
// Through cudalloc's own device layer (the calls the allocator makes), for physical pages on
// the device and on the host: cuMemCreate, cuMemMap, cuMemSetAccess per page and for the whole
// range in one call, cuMemUnmap, cuMemRelease; copies of the range between the two locations.
// Then whole moves through the allocator: a live allocation of PAGES pages offloaded to host
// memory and prefetched back (cudalloc_offload / cudalloc_prefetch's code path). Last, the
// page-table calls again with physical allocations of 16 and 64 MiB, each mapped whole, and
// mapped page by page. Last, how fast host memory is pinned (cuMemCreate of host-located 64 MiB
// allocations) by 1, 2, 4 and 8 threads at once: what the first pause of a kept region waits
// for. Also what giving idle single pages back costs beside a resume's copies: one unmap over a
// run of them, and unmap + release while a copy runs; and on a device full of single pages, what
// a refused cuMemCreate costs, and what creating a 64 MiB allocation in the room of 32
// single pages just released costs; and whether giving single pages back runs faster from
// several threads. Last, with pages of the granularity and of four times it: what creating
// 64 MiB allocations costs right after pages are given back (bench_create_after_release).
// Prints microseconds per page and GB/s. Exit 77 without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/device_allocator.h"
#include "device/cuda_device.h"

using namespace cudalloc;
using device::Location;
using device::Status;

namespace {

double now_us() {
  using namespace std::chrono;
  return static_cast<double>(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch())
                                 .count()) / 1e3;
}

// Runs f(i) for every page and returns microseconds per page; false from f aborts.
double per_page(std::size_t pages, const std::function<bool(std::size_t)>& f) {
  const double start = now_us();
  for (std::size_t i = 0; i < pages; ++i) {
    if (!f(i)) {
      std::printf("  (failed at page %zu)\n", i);
      return -1;
    }
  }
  return (now_us() - start) / static_cast<double>(pages);
}

bool ok(Status s) { return s == Status::ok; }

// Runs f(i) for i in [0, count) on `threads` threads at once, thread t taking every
// threads-th i from t; returns the wall time in microseconds.
double on_threads(unsigned threads, std::size_t count, const std::function<void(std::size_t)>& f) {
  const double start = now_us();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (std::size_t i = t; i < count; i += threads) f(i);
    });
  }
  for (std::thread& w : workers) w.join();
  return now_us() - start;
}

struct Range {
  std::uintptr_t va = 0;
  std::vector<device::PhysicalHandle> handles;
};

// Creates, maps and grants `pages` pages of `where` memory; prints the cost of each call.
bool build(device::Device& dev, Location where, std::size_t pages, std::size_t page, Range* r) {
  const char* name = where == Location::host ? "host" : "device";
  if (!ok(dev.reserve(0, pages * page, &r->va))) return false;
  r->handles.resize(pages);
  const double create = per_page(pages, [&](std::size_t i) {
    return ok(dev.create_physical(0, page, where, &r->handles[i]));
  });
  const double map = per_page(pages, [&](std::size_t i) {
    return ok(dev.map(r->va + i * page, page, r->handles[i], 0));
  });
  const double access_each = per_page(pages, [&](std::size_t i) {
    return ok(dev.set_access(0, r->va + i * page, page));
  });
  const double start = now_us();
  const bool range_ok = ok(dev.set_access(0, r->va, pages * page));
  const double access_range = (now_us() - start) / static_cast<double>(pages);
  std::printf("%-6s pages: create %7.1f us, map %6.1f us, set_access %6.1f us per page, "
              "%6.2f us per page as one range call%s\n", name, create, map, access_each,
              access_range, range_ok ? "" : " (FAILED)");
  return create >= 0 && map >= 0 && access_each >= 0;
}

void tear_down(device::Device& dev, Range& r, std::size_t page, const char* name) {
  const std::size_t pages = r.handles.size();
  const double unmap = per_page(pages, [&](std::size_t i) {
    return ok(dev.unmap(r.va + i * page, page));
  });
  const double release = per_page(pages, [&](std::size_t i) {
    return ok(dev.release_physical(r.handles[i]));
  });
  dev.unreserve(r.va, pages * page);
  std::printf("%-6s pages: unmap %6.1f us, release %7.1f us per page\n", name, unmap, release);
}

// Creates, maps and grants `pages` single-page allocations of device memory at one range,
// without printing (for the release measurements below).
bool build_quietly(device::Device& dev, std::size_t pages, std::size_t page, Range* r) {
  if (!ok(dev.reserve(0, pages * page, &r->va))) return false;
  r->handles.resize(pages);
  for (std::size_t i = 0; i < pages; ++i) {
    if (!ok(dev.create_physical(0, page, Location::device, &r->handles[i])) ||
        !ok(dev.map(r->va + i * page, page, r->handles[i], 0))) {
      return false;
    }
  }
  return ok(dev.set_access(0, r->va, pages * page));
}

// Unmaps and releases every page of `r`, page by page, and returns its range; microseconds
// per page, or -1 on a failure.
double release_pages(device::Device& dev, Range& r, std::size_t page) {
  const double us = per_page(r.handles.size(), [&](std::size_t i) {
    return ok(dev.unmap(r.va + i * page, page)) && ok(dev.release_physical(r.handles[i]));
  });
  dev.unreserve(r.va, r.handles.size() * page);
  return us;
}

double copy_gbps(device::Device& dev, std::uintptr_t dst, std::uintptr_t src, std::size_t bytes,
                 device::EventHandle event) {
  dev.copy(0, dst, src, bytes, 0);  // warm-up
  dev.synchronize(0);
  const double start = now_us();
  if (!ok(dev.copy(0, dst, src, bytes, 0)) || !ok(dev.event_record(0, event, 0)) ||
      !ok(dev.event_synchronize(event))) {
    return -1;
  }
  return static_cast<double>(bytes) / ((now_us() - start) * 1e3);
}

void bench_moves(device::Device& dev, std::size_t pages, std::size_t page) {
  Settings settings;
  settings.offload = Offload::host;
  DeviceAllocator alloc(dev, 0, settings);
  void* p = nullptr;
  if (alloc.allocate(pages * page, 0, &p) != Error::ok) {
    std::printf("moves: allocation failed: %s\n", last_error_message());
    return;
  }
  for (int round = 0; round < 3; ++round) {
    double start = now_us();
    const Error out = alloc.offload(p, 0);
    const double offload_us = (now_us() - start) / static_cast<double>(pages);
    start = now_us();
    const Error back = alloc.prefetch(p, 0);
    const double prefetch_us = (now_us() - start) / static_cast<double>(pages);
    const double gb = static_cast<double>(page) / 1e3;  // per page, in GB per microsecond * 1e6
    std::printf("move round %d: offload %6.1f us per page (%5.1f GB/s)%s, prefetch %6.1f us per "
                "page (%5.1f GB/s)%s\n", round, offload_us, gb / offload_us,
                out == Error::ok ? "" : " FAILED", prefetch_us, gb / prefetch_us,
                back == Error::ok ? "" : " FAILED");
  }
  alloc.deallocate(p);
}

// What giving idle single pages back costs where a resume needs their room (resume into
// cudalloc's cache): (a) one cuMemUnmap over a run of separately created pages, then a
// release each; (b) unmap and release page by page alone, and while a host -> device copy of
// `dst`'s size runs on the stream, to see whether the driver calls overlap the copy.
void bench_release_runs(device::Device& dev, std::uintptr_t dst, std::uintptr_t src,
                        std::size_t pages, std::size_t page, device::EventHandle event) {
  Range run;
  if (!build_quietly(dev, pages, page, &run)) {
    std::printf("release runs: building a range failed: %s\n", dev.last_failure());
    return;
  }
  double start = now_us();
  const bool one_call = ok(dev.unmap(run.va, pages * page));
  const double unmap_us = (now_us() - start) / static_cast<double>(pages);
  if (!one_call) {
    std::printf("device pages: one unmap over %zu single-page mappings refused (%s)\n", pages,
                dev.last_failure());
    release_pages(dev, run, page);
  } else {
    const double release_us = per_page(pages, [&](std::size_t i) {
      return ok(dev.release_physical(run.handles[i]));
    });
    dev.unreserve(run.va, pages * page);
    std::printf("device pages: one unmap over %zu single-page mappings %6.2f us per page, then "
                "release %6.1f us per page\n", pages, unmap_us, release_us);
  }
  Range alone, during;
  if (!build_quietly(dev, pages, page, &alone) || !build_quietly(dev, pages, page, &during)) {
    std::printf("release runs: building a range failed: %s\n", dev.last_failure());
    return;
  }
  const double alone_us = release_pages(dev, alone, page);
  const std::size_t bytes = pages * page;
  dev.synchronize(0);
  start = now_us();
  dev.copy(0, dst, src, bytes, 0);
  dev.event_record(0, event, 0);
  dev.event_synchronize(event);
  const double copy_ms = (now_us() - start) / 1e3;
  start = now_us();
  dev.copy(0, dst, src, bytes, 0);
  const double during_us = release_pages(dev, during, page);
  dev.event_record(0, event, 0);
  dev.event_synchronize(event);
  const double both_ms = (now_us() - start) / 1e3;
  std::printf("device pages: unmap + release page by page %6.1f us per page alone, %6.1f while "
              "a %zu MiB host -> device copy runs; copy alone %.2f ms, copy with the releases "
              "%.2f ms (releases alone %.2f ms)\n", alone_us, during_us, bytes >> 20, copy_ms,
              both_ms, alone_us * static_cast<double>(pages) / 1e3);
}

// Whether giving single pages back (unmap + release, what a resume into cudalloc's cache does
// for each page it needs) runs faster from several threads at once: the same number of pages
// given back by 1, 2, 4 and 8 threads, each taking every n-th page of one range; microseconds
// of wall time per page.
void bench_parallel_release(device::Device& dev, std::size_t pages, std::size_t page) {
  for (unsigned threads : {1u, 2u, 4u, 8u}) {
    Range r;
    if (!build_quietly(dev, pages, page, &r)) {
      std::printf("parallel release: building a range failed: %s\n", dev.last_failure());
      return;
    }
    std::vector<char> good(pages, 0);
    const double us = on_threads(threads, pages, [&](std::size_t i) {
      good[i] = ok(dev.unmap(r.va + i * page, page)) && ok(dev.release_physical(r.handles[i]));
    }) / static_cast<double>(pages);
    dev.unreserve(r.va, pages * page);
    const auto failed = static_cast<std::size_t>(std::count(good.begin(), good.end(), 0));
    std::printf("device pages: unmap + release of %zu pages by %u thread%s: %6.1f us per page "
                "of wall time%s\n", pages, threads, threads == 1 ? "" : "s", us,
                failed == 0 ? "" : " (some FAILED)");
  }
}

// On a device full of single pages: release 32 of them and create one 64 MiB allocation in
// their room, as a resume into cudalloc's cache of idle single pages does for each chunk.
// Pages released from the front of the list (created one after the other, so likely
// neighbours in the device's memory) and spread over the whole list (scattered holes). The
// chunks stay until the pass ends; then the device is filled with single pages again.
void bench_chunks_into_holes(device::Device& dev, std::vector<device::PhysicalHandle>* held,
                             std::size_t page) {
  constexpr std::size_t kPages = 32, kRounds = 16;
  const std::size_t chunk = kPages * page;
  for (const bool spread : {false, true}) {
    double release_us = 0, create_us = 0, worst_us = 0;
    std::vector<device::PhysicalHandle> chunks;
    for (std::size_t round = 0; round < kRounds && held->size() > kPages * 4; ++round) {
      const std::size_t stride = spread ? held->size() / kPages : 1;
      double start = now_us();
      for (std::size_t j = kPages; j-- > 0;) {  // from the back, so the indices stay valid
        const std::size_t at = j * stride;
        dev.release_physical((*held)[at]);
        held->erase(held->begin() + static_cast<std::ptrdiff_t>(at));
      }
      release_us += now_us() - start;
      start = now_us();
      device::PhysicalHandle h = 0;
      const bool created = ok(dev.create_physical(0, chunk, Location::device, &h));
      const double took = now_us() - start;
      create_us += took;
      worst_us = std::max(worst_us, took);
      if (created) chunks.push_back(h);
    }
    std::printf("full device, %s: release %zu pages %.1f us per page, then create 64 MiB "
                "%.1f us on average (worst %.1f), %zu of %zu created\n",
                spread ? "holes spread over the device" : "neighbouring pages",
                kPages, release_us / double(kRounds * kPages), create_us / double(kRounds),
                worst_us, chunks.size(), kRounds);
    // The device full of single pages again for the next pass.
    for (device::PhysicalHandle each : chunks) dev.release_physical(each);
    device::PhysicalHandle h = 0;
    while (ok(dev.create_physical(0, page, Location::device, &h))) held->push_back(h);
  }
}

// With the device full of single pages (a cache that holds all of it, as a resume into
// cudalloc's idle pages finds it): what a cuMemCreate that the driver refuses costs, for a
// page and for a 64 MiB chunk, and what asking the driver for its free memory costs.
void bench_full_device(device::Device& dev, std::size_t page) {
  std::vector<device::PhysicalHandle> held;
  device::PhysicalHandle h = 0;
  while (ok(dev.create_physical(0, page, Location::device, &h))) held.push_back(h);
  auto refused_us = [&](std::size_t bytes) {
    const double start = now_us();
    for (int i = 0; i < 10; ++i) {
      device::PhysicalHandle none = 0;
      if (ok(dev.create_physical(0, bytes, Location::device, &none))) {
        dev.release_physical(none);
        return -1.0;
      }
    }
    return (now_us() - start) / 10;
  };
  const double page_us = refused_us(page);
  const double chunk_us = refused_us(std::size_t{64} << 20);
  std::size_t free_bytes = 0, total = 0;
  const double info_us = per_page(64, [&](std::size_t) {
    return ok(dev.mem_info(0, &free_bytes, &total));
  });
  std::printf("full device (%zu pages held, %zu MiB free): a refused create costs %.1f us for "
              "one page, %.1f us for 64 MiB; mem_info %.2f us\n", held.size(), free_bytes >> 20,
              page_us, chunk_us, info_us);
  bench_chunks_into_holes(dev, &held, page);
  for (device::PhysicalHandle each : held) dev.release_physical(each);
}

// Call times gathered over repeats: average and worst, and how many the driver refused.
struct Timing {
  double sum_us = 0, worst_us = 0;
  std::size_t calls = 0, refused = 0;
  // Times one call of f (true: the driver accepted it).
  bool add(const std::function<bool()>& f) {
    const double start = now_us();
    const bool accepted = f();
    const double took = now_us() - start;
    sum_us += took;
    worst_us = std::max(worst_us, took);
    ++calls;
    if (!accepted) ++refused;
    return accepted;
  }
  void print(const char* what) const {
    std::printf("    %-44s %5zu calls, %8.1f us on average, worst %8.1f, %zu refused\n", what,
                calls, calls == 0 ? 0.0 : sum_us / double(calls), worst_us, refused);
  }
};

// The driver's side of a resume into cudalloc's cache, with pages of `unit` bytes (the
// driver's granularity, or a larger page_size): the device filled with mapped, granted and
// written single allocations of `unit` bytes; then 16 times a 64 MiB create that the full
// device refuses, 64 MiB of pages (spread over the device) unmapped and released, and the
// create again (a resume that gives idle pages back for each chunk); then 6 GiB of pages
// given back at once (as empty_cache does) and that room filled again with 64 MiB creates,
// and once more with creates of `unit` bytes. Whether creating after releases costs more
// with larger pages (page_size:8M resumes were slow on the H100, docs/offload.md).
void bench_create_after_release(device::Device& dev, std::size_t unit) {
  constexpr std::size_t kChunk = std::size_t{64} << 20, kRounds = 16;
  constexpr std::size_t kBulk = std::size_t{6} << 30;
  std::size_t free_bytes = 0, total = 0;
  if (!ok(dev.mem_info(0, &free_bytes, &total)) || free_bytes < 4 * kBulk) return;
  const std::size_t most = free_bytes / unit;
  Range r;
  if (!ok(dev.reserve(0, most * unit, &r.va))) return;
  std::vector<char> live;
  const double fill_start = now_us();
  device::PhysicalHandle h = 0;
  while (r.handles.size() < most && ok(dev.create_physical(0, unit, Location::device, &h))) {
    const std::uintptr_t va = r.va + r.handles.size() * unit;
    r.handles.push_back(h);
    live.push_back(1);
    if (!ok(dev.map(va, unit, h, 0)) || !ok(dev.set_access(0, va, unit)) ||
        !ok(dev.zero(0, va, unit, 0))) {
      std::printf("  filling the device failed: %s\n", dev.last_failure());
      live.back() = 0;  // mapped or not, released below with the others
      break;
    }
  }
  dev.synchronize(0);
  std::printf("  %zu KiB pages: device filled with %zu of them in %.0f ms\n", unit >> 10,
              r.handles.size(), (now_us() - fill_start) / 1e3);
  // Gives `count` live pages back, spread over the device from `from`: unmap + release.
  Timing give_back;
  std::size_t next = 0;
  auto release_spread = [&](std::size_t count) {
    const std::size_t stride = std::max<std::size_t>(1, r.handles.size() / count);
    for (std::size_t done = 0, at = next; done < count && at < next + r.handles.size() * 2;
         at += stride) {
      const std::size_t i = at % r.handles.size();
      if (!live[i]) continue;
      give_back.add([&] {
        return ok(dev.unmap(r.va + i * unit, unit)) && ok(dev.release_physical(r.handles[i]));
      });
      live[i] = 0;
      ++done;
    }
    ++next;
  };
  std::vector<device::PhysicalHandle> made;
  auto create = [&](Timing& t, std::size_t bytes) {
    device::PhysicalHandle c = 0;
    if (t.add([&] { return ok(dev.create_physical(0, bytes, Location::device, &c)); })) {
      made.push_back(c);
      return true;
    }
    return false;
  };
  Timing refused, after_room;
  for (std::size_t round = 0; round < kRounds; ++round) {
    create(refused, kChunk);
    release_spread(kChunk / unit);
    create(after_room, kChunk);
  }
  refused.print("64 MiB create on the full device");
  give_back.print("page unmap + release");
  after_room.print("64 MiB create in the room just given back");
  for (const std::size_t bytes : {kChunk, unit}) {
    give_back = Timing{};
    release_spread(kBulk / unit);
    Timing into_bulk;
    for (std::size_t n = 0; n < kBulk / bytes && create(into_bulk, bytes); ++n) {
    }
    std::printf("   6 GiB given back at once, then filled with %zu KiB creates:\n", bytes >> 10);
    give_back.print("page unmap + release");
    into_bulk.print("create");
  }
  for (device::PhysicalHandle each : made) dev.release_physical(each);
  for (std::size_t i = 0; i < r.handles.size(); ++i) {
    if (!live[i]) continue;
    dev.unmap(r.va + i * unit, unit);
    dev.release_physical(r.handles[i]);
  }
  dev.unreserve(r.va, most * unit);
}

// The same range backed by physical allocations of `chunk` bytes, each mapped whole: what the
// driver's page-table work costs per 2 MiB when one handle covers many pages (create, map, one
// set_access for the range, unmap, release), for device and host-located memory.
void bench_chunks(device::Device& dev, std::size_t pages, std::size_t page) {
  const std::size_t bytes = pages * page;
  for (const Location where : {Location::device, Location::host}) {
    for (const std::size_t chunk : {page, std::size_t{16} << 20, std::size_t{64} << 20}) {
      if (chunk % page != 0 || bytes % chunk != 0) continue;
      const std::size_t chunks = bytes / chunk;
      std::uintptr_t va = 0;
      if (!ok(dev.reserve(0, bytes, &va))) return;
      std::vector<device::PhysicalHandle> handles(chunks);
      const double scale = double(chunk / page);  // per_page measures per chunk
      const double create = per_page(chunks, [&](std::size_t i) {
        return ok(dev.create_physical(0, chunk, where, &handles[i]));
      }) / scale;
      const double map = per_page(chunks, [&](std::size_t i) {
        return ok(dev.map(va + i * chunk, chunk, handles[i], 0));
      }) / scale;
      double start = now_us();
      const bool access_ok = ok(dev.set_access(0, va, bytes));
      const double access = (now_us() - start) / double(pages);
      const double unmap = per_page(chunks, [&](std::size_t i) {
        return ok(dev.unmap(va + i * chunk, chunk));
      }) / scale;
      const double release = per_page(chunks, [&](std::size_t i) {
        return ok(dev.release_physical(handles[i]));
      }) / scale;
      dev.unreserve(va, bytes);
      std::printf("%-6s chunks of %3zu MiB: per 2 MiB create %7.2f us, map %6.2f us, set_access "
                  "%6.2f us (one call), unmap %6.2f us, release %7.2f us%s\n",
                  where == Location::host ? "host" : "device", chunk >> 20, create, map, access,
                  unmap, release, access_ok ? "" : " (set_access FAILED)");
    }
  }
}

// Physical allocations of `chunk` bytes mapped page by page (a map with an offset per 2 MiB),
// so that each page can still be unmapped alone, as the allocator's page moves need: does the
// driver's cost follow the allocations or the mappings? Two rounds: access granted in one call
// for the range and unmapped page by page, then granted page by page and unmapped in one call.
void bench_chunk_pages(device::Device& dev, std::size_t pages, std::size_t page) {
  const std::size_t bytes = pages * page;
  for (const std::size_t chunk : {page, std::size_t{16} << 20, std::size_t{64} << 20}) {
    if (chunk % page != 0 || bytes % chunk != 0) continue;
    const std::size_t per_chunk = chunk / page;
    std::uintptr_t va = 0;
    if (!ok(dev.reserve(0, bytes, &va))) return;
    std::vector<device::PhysicalHandle> handles(bytes / chunk);
    const double create = per_page(handles.size(), [&](std::size_t i) {
      return ok(dev.create_physical(0, chunk, Location::device, &handles[i]));
    }) / double(per_chunk);
    const auto map_pages = [&] {
      return per_page(pages, [&](std::size_t i) {
        return ok(dev.map(va + i * page, page, handles[i / per_chunk], (i % per_chunk) * page));
      });
    };
    if (create < 0) {
      std::printf("device chunks of %3zu MiB: create failed (%s)\n", chunk >> 20,
                  dev.last_failure());
      for (const device::PhysicalHandle h : handles) {
        if (h != 0) dev.release_physical(h);
      }
      dev.unreserve(va, bytes);
      continue;
    }
    const double map1 = map_pages();
    if (map1 < 0) {  // the driver maps allocations only whole
      std::printf("device chunks of %3zu MiB mapped per 2 MiB: map refused (%s)\n", chunk >> 20,
                  dev.last_failure());
      // Pages mapped before the refusal (none, where the driver refuses the first).
      for (std::size_t i = 0; i < pages; ++i) dev.unmap(va + i * page, page);
      for (const device::PhysicalHandle h : handles) dev.release_physical(h);
      dev.unreserve(va, bytes);
      continue;
    }
    double start = now_us();
    const bool access_ok = ok(dev.set_access(0, va, bytes));
    const double access_range = (now_us() - start) / double(pages);
    const double unmap_pages = per_page(pages, [&](std::size_t i) {
      return ok(dev.unmap(va + i * page, page));
    });
    const double map2 = map_pages();
    const double access_pages = per_page(pages, [&](std::size_t i) {
      return ok(dev.set_access(0, va + i * page, page));
    });
    start = now_us();
    const bool unmap_ok = ok(dev.unmap(va, bytes));
    const double unmap_range = (now_us() - start) / double(pages);
    const double release = per_page(handles.size(), [&](std::size_t i) {
      return ok(dev.release_physical(handles[i]));
    }) / double(per_chunk);
    dev.unreserve(va, bytes);
    std::printf("device chunks of %3zu MiB mapped per 2 MiB: create %6.2f us, map %5.2f/%5.2f us, "
                "set_access range %6.2f us, per page %6.2f us, unmap per page %6.2f us, range "
                "%6.2f us, release %6.2f us%s\n",
                chunk >> 20, create, map1, map2, access_range, access_pages, unmap_pages,
                unmap_range, release, access_ok && unmap_ok ? "" : " (a range call FAILED)");
  }
}

}  // namespace

// GiB/s of creating `total` bytes of host-located 64 MiB allocations with `threads` threads,
// each creating its share; every allocation is released after the timing.
void bench_host_pinning(device::Device& dev, std::size_t total, std::size_t page) {
  const std::size_t chunk = std::max<std::size_t>(page, std::size_t{64} << 20);
  const std::size_t count = std::max<std::size_t>(1, total / chunk);
  for (unsigned threads : {1u, 2u, 4u, 8u}) {
    std::vector<device::PhysicalHandle> handles(count, 0);
    std::vector<char> good(count, 0);
    const double us = on_threads(threads, count, [&](std::size_t i) {
      good[i] = ok(dev.create_physical(0, chunk, Location::host, &handles[i]));
    });
    std::size_t made = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (!good[i]) continue;
      ++made;
      dev.release_physical(handles[i]);
    }
    std::printf("host pinning, %u thread%s: %zu x %zu MiB in %.1f ms, %.2f GiB/s%s\n", threads,
                threads == 1 ? "" : "s", count, chunk >> 20, us / 1e3,
                static_cast<double>(made * chunk) / (us / 1e6) / double(1u << 30),
                made == count ? "" : " (some FAILED)");
  }
}

int main(int argc, char** argv) {
  const bool only_creates = argc > 1 && std::string(argv[1]) == "--create-after-release";
  const std::size_t pages = argc > 1 && !only_creates ? std::strtoull(argv[1], nullptr, 10) : 256;
  const std::size_t background = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  auto dev = device::make_cuda_device();
  if (dev->device_count() == 0 || dev->granularity(0) == 0 || pages == 0) {
    std::printf("SKIP: no CUDA device with virtual memory management\n");
    return 77;
  }
  const std::size_t page = dev->granularity(0);
  std::printf("page-move-bench: %zu pages of %zu KiB\n", pages, page >> 10);
  if (only_creates) {
    for (const std::size_t unit : {page, 4 * page}) bench_create_after_release(*dev, unit);
    return 0;
  }
  // Live single-page allocations held throughout, as a paged cache of that size holds them:
  // whether the driver's calls cost more with many allocations in the process.
  Range held;
  if (background != 0) {
    const double start = now_us();
    if (!build_quietly(*dev, background, page, &held)) {
      std::printf("building %zu background pages failed: %s\n", background, dev->last_failure());
      return 1;
    }
    std::printf("%zu background single-page allocations held (%zu MiB), built at %.1f us per "
                "page\n", background, (background * page) >> 20,
                (now_us() - start) / static_cast<double>(background));
  }
  Range on_device, on_host;
  if (!build(*dev, Location::device, pages, page, &on_device) ||
      !build(*dev, Location::host, pages, page, &on_host)) {
    std::printf("building the ranges failed: %s\n", dev->last_failure());
    return 1;
  }
  device::EventHandle event = 0;
  dev->event_create(0, &event);
  const std::size_t bytes = pages * page;
  std::printf("copy device -> host %.1f GB/s, host -> device %.1f GB/s (%zu MiB, one call)\n",
              copy_gbps(*dev, on_host.va, on_device.va, bytes, event),
              copy_gbps(*dev, on_device.va, on_host.va, bytes, event), bytes >> 20);
  const double sync = per_page(64, [&](std::size_t) {
    return ok(dev->event_record(0, event, 0)) && ok(dev->event_synchronize(event));
  });
  std::printf("event record + synchronize on an idle stream: %.1f us\n", sync);
  bench_release_runs(*dev, on_device.va, on_host.va, pages, page, event);
  bench_parallel_release(*dev, std::max<std::size_t>(pages, 512), page);
  dev->event_destroy(event);
  tear_down(*dev, on_device, page, "device");
  tear_down(*dev, on_host, page, "host");
  bench_moves(*dev, pages, page);
  bench_chunks(*dev, pages, page);
  bench_chunk_pages(*dev, pages, page);
  bench_host_pinning(*dev, std::max<std::size_t>(bytes, std::size_t{2} << 30), page);
  if (background != 0) {
    // The background pages were granted in one call over their whole range.
    std::printf("%zu background pages (one range, one grant): unmap + release page by page "
                "%.1f us per page\n", background, release_pages(*dev, held, page));
  }
  bench_full_device(*dev, page);
  std::printf("creating after giving pages back, by page size:\n");
  for (const std::size_t unit : {page, 4 * page}) bench_create_after_release(*dev, unit);
  return 0;
}
