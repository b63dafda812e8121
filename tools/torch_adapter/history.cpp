#include "history.h"

namespace cudalloc::torch_adapter {

void History::configure(bool enabled, cca::CreateContextFn recorder, std::size_t max_entries,
                        cca::RecordContext when, bool clear) {
  std::lock_guard lock(mutex_);
  recorder_ = enabled ? recorder : nullptr;
  when_ = enabled ? when : cca::RecordContext::NEVER;
  max_entries_ = enabled ? max_entries : 0;
  if (clear || !enabled) {
    trace_.clear();
    live_.clear();
  }
  enabled_.store(enabled || tracked_.load(), std::memory_order_relaxed);
}

History::Context History::gather_for_alloc() const {
  if (!enabled()) return nullptr;
  cca::CreateContextFn recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (when_ == cca::RecordContext::NEVER) return nullptr;
    recorder = recorder_;
  }
  return recorder != nullptr ? recorder() : nullptr;
}

History::Context History::gather_for_free() const {
  if (!enabled()) return nullptr;
  cca::CreateContextFn recorder = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (when_ != cca::RecordContext::ALL) return nullptr;
    recorder = recorder_;
  }
  return recorder != nullptr ? recorder() : nullptr;
}

void History::record(cca::TraceEntry::Action action, c10::DeviceIndex device,
                     std::uintptr_t addr, std::size_t size, void* stream, c10::MempoolId_t pool,
                     Context context) {
  if (!enabled()) return;
  std::vector<cca::AllocatorTraceTracker> trackers;
  std::unique_lock lock(mutex_);
  cca::TraceEntry entry(action, device, addr, size, stream, pool, c10::getApproximateTime(),
                        when_ >= cca::RecordContext::ALLOC ? context : nullptr);
  {
    if (action == cca::TraceEntry::ALLOC) live_[addr] = Live{context, size, stream, pool, device};
    if (max_entries_ != 0) {
      if (trace_.size() >= max_entries_) trace_.pop_front();
      trace_.push_back(entry);
    }
    trackers = trackers_;
  }
  lock.unlock();
  for (const auto& tracker : trackers) tracker(entry);
}

void History::attach_tracker(cca::AllocatorTraceTracker tracker) {
  std::lock_guard lock(mutex_);
  trackers_.push_back(std::move(tracker));
  tracked_.store(true);
  enabled_.store(true, std::memory_order_relaxed);
}

History::Context History::context_of(std::uintptr_t addr) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(addr);
  return it == live_.end() ? nullptr : it->second.context;
}

void History::record_free(std::uintptr_t addr, Context context) {
  if (!enabled()) return;
  Live live;
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(addr);
    if (it == live_.end()) return;  // allocated before recording started
    live = it->second;
    live_.erase(it);
  }
  record(cca::TraceEntry::FREE_REQUESTED, live.device, addr, live.size, live.stream, live.pool,
         context);
  record(cca::TraceEntry::FREE_COMPLETED, live.device, addr, live.size, live.stream, live.pool,
         context);
}

std::vector<std::vector<cca::TraceEntry>> History::traces(int devices) const {
  std::vector<std::vector<cca::TraceEntry>> out(static_cast<std::size_t>(std::max(devices, 0)));
  std::lock_guard lock(mutex_);
  auto to_ns = clock_.makeConverter();
  for (const cca::TraceEntry& e : trace_) {
    if (e.device_ < 0 || static_cast<std::size_t>(e.device_) >= out.size()) continue;
    cca::TraceEntry copy = e;
    copy.time_.t_ = to_ns(e.time_.approx_t_) / 1000;
    out[static_cast<std::size_t>(e.device_)].push_back(std::move(copy));
  }
  return out;
}

}  // namespace cudalloc::torch_adapter
