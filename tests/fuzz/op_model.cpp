#include "op_model.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>

namespace cudalloc::fuzz {

using device::Status;

// ---- ShadowHeap -------------------------------------------------------------------------

const Allocation* ShadowHeap::overlapping(std::uintptr_t addr, std::size_t size) const {
  auto it = live_.lower_bound(addr + size);  // first that starts at or after the end
  if (it == live_.begin()) return nullptr;
  --it;                                       // the last that starts before the end
  return it->first + it->second.size > addr ? &it->second : nullptr;
}

Allocation* ShadowHeap::starting_at(std::uintptr_t addr) {
  auto it = live_.find(addr);
  return it == live_.end() ? nullptr : &it->second;
}

const Allocation* ShadowHeap::containing(std::uintptr_t addr) const {
  return overlapping(addr, 1);
}

void ShadowHeap::add(const Allocation& a) { live_.emplace(a.addr, a); }

Allocation ShadowHeap::remove(std::uintptr_t addr) {
  auto node = live_.extract(addr);
  return std::move(node.mapped());
}

Allocation& ShadowHeap::nth(std::size_t i) {
  return std::next(live_.begin(), static_cast<long>(i))->second;
}

std::size_t ShadowHeap::count_on(int device) const {
  return static_cast<std::size_t>(std::count_if(
      live_.begin(), live_.end(), [&](const auto& kv) { return kv.second.device == device; }));
}

std::vector<std::uintptr_t> ShadowHeap::addresses() const {
  std::vector<std::uintptr_t> out;
  for (const auto& [addr, a] : live_) out.push_back(addr);
  return out;
}

// ---- Patterns ---------------------------------------------------------------------------

namespace {

constexpr std::size_t kWholeUpTo = 4096;
constexpr std::size_t kEdge = 256;
constexpr std::size_t kPage = 1024 * 1024;
constexpr std::size_t kPageSample = 64;

// Destroys one of the model's own events; a second attempt gets past an injected fault.
void destroy(FakeDevice& fake, EventHandle e) {
  if (fake.event_destroy(e) != Status::ok) fake.event_destroy(e);
}

// The allocation's bytes: its tag's 8-byte mix, repeated, as one block to copy from.
using PatternBlock = std::array<unsigned char, kWholeUpTo>;
PatternBlock pattern_block(std::uint64_t tag) {
  const std::uint64_t word = (tag + 1) * 0x9E3779B97F4A7C15ull;
  PatternBlock block;
  for (std::size_t i = 0; i < block.size(); i += sizeof word) std::memcpy(&block[i], &word, sizeof word);
  return block;
}

// Calls f(first, bytes) for each sampled range of the allocation (at most kWholeUpTo bytes).
template <typename F>
void for_each_sample(const Allocation& a, F&& f) {
  const std::uintptr_t end = a.addr + a.size;
  if (a.size <= kWholeUpTo) return f(a.addr, a.size);
  f(a.addr, kEdge);
  for (std::uintptr_t page = (a.addr + kEdge + kPage - 1) / kPage * kPage;
       page + kPageSample <= end - kEdge; page += kPage) {
    f(page, kPageSample);
  }
  f(end - kEdge, kEdge);
}

}  // namespace

void write_pattern(const Allocation& a) {
  const PatternBlock block = pattern_block(a.tag);
  for_each_sample(a, [&](std::uintptr_t first, std::size_t bytes) {
    std::memcpy(reinterpret_cast<void*>(first), block.data(), bytes);
  });
}

std::string check_pattern(const Allocation& a) {
  const PatternBlock block = pattern_block(a.tag);
  std::string problem;
  for_each_sample(a, [&](std::uintptr_t first, std::size_t bytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(first);
    if (!problem.empty() || std::memcmp(p, block.data(), bytes) == 0) return;
    std::size_t i = 0;
    while (p[i] == block[i]) ++i;
    problem = "byte " + std::to_string(first + i - a.addr) + " of allocation " +
              std::to_string(a.tag) + " (" + std::to_string(a.size) + " bytes) was overwritten";
  });
  return problem;
}

// ---- Quarantine -------------------------------------------------------------------------

bool Quarantine::record(int device, StreamHandle stream, EventHandle* event) {
  // The model's calls go through fault injection too: a fault is one call, so a second
  // attempt gets past it.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (fake_.event_create(device, event) != Status::ok) continue;
    if (fake_.event_record(device, *event, stream) == Status::ok) return true;
    destroy(fake_, *event);
  }
  return false;
}

void Quarantine::hold(const Allocation& a) {
  Held h{a, {}};
  for (StreamHandle s : a.uses) {
    if (fake_.stream_idle(a.device, s)) continue;
    EventHandle e = 0;
    if (record(a.device, s, &e)) h.events.push_back(e);
  }
  if (!h.events.empty()) held_.push_back(std::move(h));
}

void Quarantine::release_completed() {
  std::erase_if(held_, [&](Held& h) {
    std::erase_if(h.events, [&](EventHandle e) {
      // A query fault reads as "not yet"; the next check asks again.
      if (fake_.event_query(e) != Status::ok) return false;
      destroy(fake_, e);
      return true;
    });
    return h.events.empty();
  });
}

const Allocation* Quarantine::pending_overlap(std::uintptr_t addr, std::size_t size) {
  release_completed();
  for (const Held& h : held_) {
    if (h.allocation.addr < addr + size && addr < h.allocation.addr + h.allocation.size) {
      return &h.allocation;
    }
  }
  return nullptr;
}

void Quarantine::forget(int device) {
  std::erase_if(held_, [&](Held& h) {
    if (h.allocation.device != device) return false;
    for (EventHandle e : h.events) destroy(fake_, e);
    return true;
  });
}

void Quarantine::clear() {
  for (Held& h : held_) {
    for (EventHandle e : h.events) destroy(fake_, e);
  }
  held_.clear();
}

}  // namespace cudalloc::fuzz
