#include "replay/runner.h"

#include <chrono>
#include <vector>

#include "core/device_allocator.h"
#include "device/fake_device.h"
#include "replay/expandable_model.h"
#include "replay/pytorch_model.h"

namespace cudalloc::replay {
namespace {

// Replays every op through allocate(size, stream, void**) -> bool and release(void*),
// returning the nanoseconds spent per op. Allocations that fail are counted and their frees
// skipped. at_end() runs after the last op, before what the trace left live is released.
// at_half() runs once, when half of the ops have been replayed.
template <typename Allocate, typename Release, typename AtHalf, typename AtEnd>
double timed_replay(const Plan& plan, Allocate&& allocate, Release&& release, AtHalf&& at_half,
                    AtEnd&& at_end, std::uint64_t* failures) {
  std::vector<void*> slots(plan.slots, nullptr);
  const std::size_t half = plan.ops.size() / 2;
  std::size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const ReplayOp& op : plan.ops) {
    if (done++ == half) at_half();
    if (op.kind == ReplayOp::alloc) {
      if (!allocate(op.size, op.stream, &slots[op.slot])) {
        slots[op.slot] = nullptr;
        ++*failures;
      }
    } else if (slots[op.slot] != nullptr) {
      release(slots[op.slot]);
      slots[op.slot] = nullptr;
    }
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  at_end();
  // Whatever the trace left live is released outside the timed loop.
  for (void* p : slots) {
    if (p != nullptr) release(p);
  }
  return plan.ops.empty() ? 0.0 : elapsed.count() / static_cast<double>(plan.ops.size());
}

}  // namespace

PolicyResult run_cudalloc(const Plan& plan, const Settings& settings, std::uint64_t capacity,
                          DeviceState* final_state, bool device_order) {
  const auto order = device_order ? DeviceAllocator::FreeOrder::device
                                  : DeviceAllocator::FreeOrder::stream;
  device::FakeDevice::Options options;
  options.capacity = capacity;
  options.devices = plan.device + 1;
  options.backing = false;  // the allocator's cost, not the simulation's system calls
  device::FakeDevice fake(options);
  DeviceAllocator alloc(fake, plan.device, settings);
  PolicyResult r;
  Stats half;  // the stats when half of the ops have been replayed
  r.policy = "cudalloc";
  r.replay_ns_per_event = timed_replay(
      plan,
      [&](std::uint64_t size, std::uint64_t stream, void** p) {
        return alloc.allocate(size, stream, p) == Error::ok;
      },
      [&](void* p) { alloc.deallocate(p, order); },
      [&] { half = alloc.stats(); },
      [&] {
        if (final_state != nullptr) *final_state = alloc.state();
      },
      &r.oom_events);
  const Stats s = alloc.stats();
  r.page_maps = static_cast<std::uint64_t>(s.page_maps.total);
  r.page_unmaps = static_cast<std::uint64_t>(s.page_unmaps.total);
  r.page_waits = static_cast<std::uint64_t>(s.page_waits.total);
  r.fences = static_cast<std::uint64_t>(s.fences.total);
  r.late_page_maps = r.page_maps - static_cast<std::uint64_t>(half.page_maps.total);
  r.late_page_unmaps = r.page_unmaps - static_cast<std::uint64_t>(half.page_unmaps.total);
  r.peak_reserved_bytes = static_cast<std::uint64_t>(s.reserved_bytes.peak);
  r.final_reserved_bytes = static_cast<std::uint64_t>(s.reserved_bytes.current);
  r.device_allocs = static_cast<std::uint64_t>(s.device_allocs.total);
  r.device_frees = static_cast<std::uint64_t>(s.device_frees.total);
  r.problem = alloc.validate();
  return r;
}

namespace {

// Replays `plan` through a model of PyTorch (BlockModel's interface); at_half(model) runs
// when half of the ops have been replayed.
template <typename Model, typename AtHalf>
PolicyResult run_model(const Plan& plan, Model& model, const char* name, AtHalf&& at_half) {
  PolicyResult r;
  r.policy = name;
  r.replay_ns_per_event = timed_replay(
      plan,
      [&](std::uint64_t size, std::uint64_t stream, void** p) {
        return model.allocate(size, stream, p);
      },
      [&](void* p) { model.free(p); }, [&] { at_half(model); }, [] {}, &r.oom_events);
  r.peak_reserved_bytes = model.peak_reserved();
  r.final_reserved_bytes = model.reserved();
  r.device_allocs = model.segment_allocs();
  r.device_frees = model.segment_frees();
  return r;
}

}  // namespace

PolicyResult run_pytorch(const Plan& plan, std::uint64_t capacity) {
  PytorchModel model(capacity);
  return run_model(plan, model, "pytorch", [](const PytorchModel&) {});
}

PolicyResult run_expandable(const Plan& plan, std::uint64_t capacity) {
  ExpandableModel model(capacity);
  std::uint64_t half_maps = 0, half_unmaps = 0;
  PolicyResult r = run_model(plan, model, "expandable", [&](const ExpandableModel& m) {
    half_maps = m.page_maps();
    half_unmaps = m.page_unmaps();
  });
  r.page_maps = model.page_maps();
  r.page_unmaps = model.page_unmaps();
  r.late_page_maps = r.page_maps - half_maps;
  r.late_page_unmaps = r.page_unmaps - half_unmaps;
  return r;
}

}  // namespace cudalloc::replay
