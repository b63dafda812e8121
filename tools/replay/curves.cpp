#include "replay/curves.h"

#include <algorithm>
#include <limits>

#include "replay/expandable_model.h"
#include "replay/pytorch_model.h"
#include "replay/runner.h"

namespace cudalloc::replay {
namespace {

// Folds the value after each event into the event's bucket (curves.h's contract). Events
// come in ascending order.
class Buckets {
 public:
  Buckets(const std::vector<std::uint64_t>& first, ReservedCurve* curve)
      : first_(first), curve_(curve) {
    curve->min.assign(first.size(), std::numeric_limits<std::int64_t>::max());
    curve->max.assign(first.size(), std::numeric_limits<std::int64_t>::min());
    put(0, 0);  // the state before the first event
  }
  // `value`: the reserved bytes after event `event`.
  void fold(std::uint64_t event, std::int64_t value) {
    while (k_ + 1 < first_.size() && first_[k_ + 1] <= event) {
      ++k_;
      if (k_ + 1 < first_.size() && first_[k_ + 1] <= event) put(k_, carried_);  // no events
    }
    put(k_, value);
    carried_ = value;
  }
  // After the last event: the buckets not reached hold the last value.
  void finish() {
    while (++k_ < first_.size()) put(k_, carried_);
  }

 private:
  void put(std::size_t k, std::int64_t value) {
    curve_->min[k] = std::min(curve_->min[k], value);
    curve_->max[k] = std::max(curve_->max[k], value);
  }

  const std::vector<std::uint64_t>& first_;
  ReservedCurve* curve_;
  std::size_t k_ = 0;
  std::int64_t carried_ = 0;
};

// One policy's curve: `plan` (of `events` events) replayed through `policy` (runner.h), its
// reserved bytes read after each op.
template <typename Policy>
ReservedCurve sample(const char* name, const Plan& plan, std::uint64_t events,
                     const std::vector<std::uint64_t>& bucket_first, Policy& policy) {
  ReservedCurve curve;
  curve.policy = name;
  Buckets buckets(bucket_first, &curve);
  OpReplayer replayer(plan);
  std::size_t op = 0;
  std::int64_t value = 0;
  for (std::uint64_t e = 0; e < events; ++e) {
    if (op < plan.ops.size() && plan.op_events[op] == e) {
      replayer.apply(op++, policy);
      value = static_cast<std::int64_t>(policy.reserved());
    }
    buckets.fold(e, value);
  }
  buckets.finish();
  curve.peak_reserved = policy.peak_reserved();
  curve.oom_events = replayer.failed().size();
  const std::uint64_t live = served_peak_live(plan, replayer.failed());
  curve.fragmentation = live ? double(curve.peak_reserved) / double(live) : 0.0;
  curve.skipped_events = plan.skipped_events;
  replayer.release_all(policy);
  return curve;
}

bool check_buckets(const std::vector<std::uint64_t>& first, std::string* error) {
  if (first.empty() || first[0] != 0) {
    *error = "replay_curves: bucket_first must start with 0";
    return false;
  }
  for (std::size_t k = 1; k < first.size(); ++k) {
    if (first[k] < first[k - 1]) {
      *error = "replay_curves: bucket_first decreases at bucket " + std::to_string(k) + " (" +
               std::to_string(first[k]) + " after " + std::to_string(first[k - 1]) + ")";
      return false;
    }
  }
  return true;
}

}  // namespace

bool replay_curves(const std::vector<snapshot::TraceRecord>& events, const Settings& settings,
                   std::uint64_t capacity, const std::vector<std::uint64_t>& bucket_first,
                   std::vector<ReservedCurve>* out, std::string* error) {
  if (!check_buckets(bucket_first, error)) return false;
  const int device = events.empty() ? 0 : events.front().device;
  for (const auto& e : events) {
    if (e.device != device) {
      *error = "replay_curves: events of devices " + std::to_string(device) + " and " +
               std::to_string(e.device) + "; it takes one device's";
      return false;
    }
  }
  Plan plan;
  if (!make_plan(events, device, true, &plan, error)) return false;
  std::vector<ReservedCurve> curves;
  {
    CudallocPolicy cudalloc(device, settings, capacity, false);
    curves.push_back(sample("cudalloc", plan, events.size(), bucket_first, cudalloc));
    curves.back().page_maps =
        static_cast<std::uint64_t>(cudalloc.allocator().stats().page_maps.total);
  }
  {
    PytorchModel pytorch(capacity);
    curves.push_back(sample("pytorch", plan, events.size(), bucket_first, pytorch));
  }
  {
    ExpandableModel expandable(capacity);
    curves.push_back(sample("expandable", plan, events.size(), bucket_first, expandable));
    curves.back().page_maps = expandable.page_maps();
  }
  *out = std::move(curves);
  return true;
}

}  // namespace cudalloc::replay
