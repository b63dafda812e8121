#include "replay/runner.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/log.h"
#include "replay/expandable_model.h"
#include "replay/pytorch_model.h"

namespace cudalloc::replay {
namespace {

device::FakeDevice::Options unbacked(int device, std::uint64_t capacity) {
  device::FakeDevice::Options options;
  options.capacity = capacity;
  options.devices = device + 1;
  options.backing = false;
  return options;
}

// Replays every op of `plan` through `policy` (OpReplayer), returning the nanoseconds spent.
// at_half() runs once, when half of the ops have been replayed; at_end() after the last op,
// before what the trace left live is released (outside the timed loop).
template <typename Policy, typename AtHalf, typename AtEnd>
double timed_replay(const Plan& plan, Policy& policy, AtHalf&& at_half, AtEnd&& at_end,
                    OpReplayer* replayer) {
  const std::size_t half = plan.ops.size() / 2;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    if (i == half) at_half();
    replayer->apply(i, policy);
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  at_end();
  replayer->release_all(policy);
  return elapsed.count();
}

double per_op(const Plan& plan, double ns) {
  return plan.ops.empty() ? 0.0 : ns / static_cast<double>(plan.ops.size());
}

// The failures of a replay of `plan`, into r (oom_events and what comes with them).
void note_failures(const Plan& plan, const OpReplayer& replayer, PolicyResult* r) {
  const std::vector<std::size_t>& failed = replayer.failed();
  r->oom_events = failed.size();
  r->served_peak_live_bytes = served_peak_live(plan, failed);
  if (failed.empty()) return;
  r->first_failed_size = plan.ops[failed.front()].size;
  r->first_failed_event = plan.op_events[failed.front()];
}

// Replays `plan` through a model of PyTorch (BlockModel's interface); at_half(model) runs
// when half of the ops have been replayed.
template <typename Model, typename AtHalf>
PolicyResult run_model(const Plan& plan, Model& model, const char* name, AtHalf&& at_half) {
  PolicyResult r;
  r.policy = name;
  OpReplayer replayer(plan);
  r.replay_ns_per_event =
      per_op(plan, timed_replay(plan, model, [&] { at_half(model); }, [] {}, &replayer));
  note_failures(plan, replayer, &r);
  r.peak_reserved_bytes = model.peak_reserved();
  r.final_reserved_bytes = model.reserved();
  r.device_allocs = model.segment_allocs();
  r.device_frees = model.segment_frees();
  return r;
}

// Lowers the logger to errors from its default level (warn); returns the level it had.
int quiet_warnings() {
  const spdlog::level::level_enum level = log().level();
  if (level == spdlog::level::warn) log().set_level(spdlog::level::err);
  return static_cast<int>(level);
}

}  // namespace

CudallocPolicy::CudallocPolicy(int device, const Settings& settings, std::uint64_t capacity,
                               bool device_order)
    : log_level_(quiet_warnings()),
      fake_(unbacked(device, capacity)),
      timed_(fake_),
      alloc_(timed_, device, settings),
      order_(device_order ? DeviceAllocator::FreeOrder::device
                          : DeviceAllocator::FreeOrder::stream) {}

CudallocPolicy::~CudallocPolicy() {
  log().set_level(static_cast<spdlog::level::level_enum>(log_level_));
}

std::uint64_t CudallocPolicy::reserved() const {
  return static_cast<std::uint64_t>(alloc_.stats().reserved_bytes.current);
}

std::uint64_t CudallocPolicy::peak_reserved() const {
  return static_cast<std::uint64_t>(alloc_.stats().reserved_bytes.peak);
}

std::uint64_t served_peak_live(const Plan& plan, const std::vector<std::size_t>& failed) {
  if (failed.empty()) return plan.peak_live_bytes;
  std::vector<bool> missing(plan.slots, false);  // the slot's allocation failed
  std::uint64_t live = 0, peak = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const ReplayOp& op = plan.ops[i];
    if (op.kind == ReplayOp::alloc) {
      missing[op.slot] = next < failed.size() && failed[next] == i;
      if (missing[op.slot]) {
        ++next;
        continue;
      }
      live += op.size;
      peak = std::max(peak, live);
    } else if (!missing[op.slot]) {
      live -= op.size;
    }
  }
  return peak;
}

PolicyResult run_cudalloc(const Plan& plan, const Settings& settings, std::uint64_t capacity,
                          DeviceState* final_state, bool device_order) {
  CudallocPolicy policy(plan.device, settings, capacity, device_order);
  DeviceAllocator& alloc = policy.allocator();
  PolicyResult r;
  Stats half;  // the stats when half of the ops have been replayed
  r.policy = "cudalloc";
  OpReplayer replayer(plan);
  const double device_before = policy.device_ns();
  double device_ns = 0;
  const double ns = timed_replay(
      plan, policy, [&] { half = alloc.stats(); },
      [&] {
        device_ns = policy.device_ns() - device_before;
        if (final_state != nullptr) *final_state = alloc.state();
      },
      &replayer);
  r.device_ns_per_event = per_op(plan, device_ns);
  r.replay_ns_per_event = per_op(plan, std::max(0.0, ns - device_ns));
  note_failures(plan, replayer, &r);
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
  r.paged = alloc.paged();
  r.problem = alloc.validate();
  return r;
}

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
