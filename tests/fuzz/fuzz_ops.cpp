// Fuzz target: sequences of allocator operations on a small simulated device pair.
//
// The input decodes (byte_stream.h) to settings, then up to kMaxOps operations on two
// DeviceAllocators over one FakeDevice with manual streams: allocations of every kind of size
// (0, tiny, slab, block, near and past the capacity, SIZE_MAX), frees of live, already freed,
// foreign, interior and other-device pointers, record_stream, work queued and completed on
// four streams, empty_cache, caps, device-ordered frees, registered streams, reset, the host
// tier (offload:host with host_limit and promote; offload, prefetch, promote and residency of
// live allocations), and injected device faults (FakeDevice::fail_call).
//
// After every operation: validate() holds on each device the operation used (the other's
// state cannot have changed: devices share nothing), the allocated counts equal the model's,
// every live allocation is owned by its device only. The model (op_model.h) adds what
// validate() cannot see: no two live allocations overlap, no allocation lands in memory still
// waiting for record_stream streams, and every allocation's bytes survive until it is freed.
// Each call must give one of the results its contract allows. At the end, with faults cleared
// and everything freed, empty_cache must give all device memory back, and destroying the
// allocators must leave no events behind (except those whose destruction was made to fail).
//
// A violation prints the last operations and aborts, which libFuzzer reports as a crash.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "byte_stream.h"
#include "core/device_allocator.h"
#include "core/errors.h"
#include "op_model.h"
#include "util/units.h"

namespace cudalloc::fuzz {
namespace {

using device::CallKind;
using device::Status;

constexpr int kDevices = 2;
constexpr std::size_t kCapacity = 32 * MiB;
constexpr StreamHandle kStreams[] = {0, 0x100, 0x200, 0x300};
constexpr std::size_t kMaxOps = 400;
constexpr std::size_t kFreedKept = 16;

enum class Op : std::uint8_t {
  allocate,
  free,
  free_device_order,
  double_free,
  foreign_free,
  interior_free,
  wrong_device_free,
  record_stream,
  record_stream_foreign,
  enqueue_work,
  complete_work,
  complete_all,
  empty_cache,
  set_limit,
  set_fraction,
  inject_fault,
  register_stream,
  unregister_stream,
  memory_info,
  reset,
  offload,  // offload, prefetch, promote or residency of a live allocation
  count_,
};

class OpFuzzer {
 public:
  explicit OpFuzzer(ByteStream& in) : in_(in), fake_(fake_options()), quarantine_(fake_) {
    const Settings settings = decode_settings();
    for (int d = 0; d < kDevices; ++d) {
      devices_.push_back(std::make_unique<DeviceAllocator>(fake_, d, settings));
    }
  }

  void run() {
    for (std::size_t i = 0; i < kMaxOps && !in_.done(); ++i) {
      touched_ = 0;
      step(static_cast<Op>(in_.below(static_cast<std::size_t>(Op::count_))));
      check_all();
    }
    finish();
  }

 private:
  static FakeDevice::Options fake_options() {
    FakeDevice::Options o;
    o.capacity = kCapacity;
    o.devices = kDevices;
    o.manual_streams = true;
    return o;
  }

  Settings decode_settings() {
    Settings s;
    static constexpr std::size_t kSlabMax[] = {256, 4 * KiB, 256 * KiB, 1 * MiB};
    static constexpr std::size_t kLargeSegment[] = {2 * MiB, 4 * MiB, 20 * MiB};
    static constexpr std::size_t kLimit[] = {0, 0, 8 * MiB, 24 * MiB};
    s.slab_max = kSlabMax[in_.below(4)];
    s.large_segment = kLargeSegment[in_.below(3)];
    s.slab_keep = in_.below(3);
    s.limit = kLimit[in_.below(4)];
    s.trace = in_.below(2) * 64;
    static constexpr std::size_t kHostLimit[] = {0, 4 * MiB, 16 * MiB};
    static constexpr double kPromote[] = {0, 0, 0.5, 0.9};
    s.offload = in_.below(2) ? Offload::host : Offload::none;
    s.host_limit = kHostLimit[in_.below(3)];
    s.promote = kPromote[in_.below(4)];
    return s;
  }

  // The allocator of device d, noted as touched by the current step (only touched devices
  // are validated after it: the others' state cannot have changed, devices share nothing).
  DeviceAllocator& use(int d) {
    touched_ |= 1u << d;
    return *devices_[static_cast<std::size_t>(d)];
  }

  // ---- decoding helpers ----
  int pick_device() { return static_cast<int>(in_.below(kDevices)); }
  StreamHandle pick_stream() { return kStreams[in_.below(std::size(kStreams))]; }
  std::size_t pick_size() {
    static constexpr std::size_t kEdges[] = {1, 255, 256, 257, 511, 512, 513, 2 * KiB + 1,
                                             256 * KiB, 256 * KiB + 1, 1 * MiB, 1 * MiB + 1,
                                             2 * MiB, 2 * MiB + 1, 10 * MiB, 10 * MiB + 1,
                                             20 * MiB, 31 * MiB, kCapacity, kCapacity + 1};
    switch (in_.below(10)) {
      case 0: return 0;
      case 1: return 1 + in_.u8();
      case 2: return 1 + in_.u32() % (256 * KiB);
      case 3: return 1 + in_.u32() % (4 * MiB);
      case 4: return 1 + in_.u32() % (kCapacity - 1);
      case 5: return kCapacity + 1 + in_.u16();
      case 6: return std::numeric_limits<std::size_t>::max() - in_.u8();
      case 7: return DeviceAllocator::kMaxRequest - 128 + in_.u8();
      default: return kEdges[in_.below(std::size(kEdges))];
    }
  }
  // A live allocation, or nullptr when there is none.
  Allocation* pick_live() {
    if (heap_.size() == 0) return nullptr;
    return &heap_.nth(in_.below(heap_.size()));
  }

  // ---- reporting ----
  // Keeps a line about the operation just done, for the report of a violation.
  __attribute__((format(printf, 2, 3))) void note(const char* format, ...) {
    char line[160];
    va_list args;
    va_start(args, format);
    std::vsnprintf(line, sizeof line, format, args);
    va_end(args);
    recent_.emplace_back(line);
    if (recent_.size() > 40) recent_.pop_front();
  }
  [[noreturn]] void violation(const std::string& what) {
    std::fprintf(stderr, "fuzz_ops: VIOLATION: %s\nlast error: %s\nlast operations:\n",
                 what.c_str(), last_error_message());
    for (const std::string& line : recent_) std::fprintf(stderr, "  %s\n", line.c_str());
    std::abort();
  }
  void expect(bool condition, const std::string& what) {
    if (!condition) violation(what);
  }
  static std::string name(Error e) { return error_name(e); }

  // ---- operations ----
  void step(Op op) {
    switch (op) {
      case Op::allocate: return allocate();
      case Op::free: return free_live(DeviceAllocator::FreeOrder::stream);
      case Op::free_device_order: return free_live(DeviceAllocator::FreeOrder::device);
      case Op::double_free: return double_free();
      case Op::foreign_free: return foreign_free();
      case Op::interior_free: return interior_free();
      case Op::wrong_device_free: return wrong_device_free();
      case Op::record_stream: return record_stream();
      case Op::record_stream_foreign: return record_stream_foreign();
      case Op::enqueue_work: {
        const int d = pick_device();
        const StreamHandle s = pick_stream();
        note("enqueue_work dev %d stream %#zx", d, std::size_t(s));
        return fake_.enqueue_work(d, s);
      }
      case Op::complete_work: {
        const int d = pick_device();
        const StreamHandle s = pick_stream();
        note("complete_work dev %d stream %#zx", d, std::size_t(s));
        return fake_.complete_work(d, s);
      }
      case Op::complete_all: note("complete_all"); return fake_.complete_all();
      case Op::empty_cache: {
        const int d = pick_device();
        note("empty_cache dev %d", d);
        const Error e = use(d).empty_cache();
        return expect(e == Error::ok, "empty_cache failed: " + name(e));
      }
      case Op::set_limit: return set_limit();
      case Op::set_fraction: return set_fraction();
      case Op::inject_fault: return inject_fault();
      case Op::register_stream: {
        const int d = pick_device();
        const StreamHandle s = kStreams[1 + in_.below(std::size(kStreams) - 1)];
        note("register_stream dev %d stream %#zx", d, std::size_t(s));
        return use(d).register_stream(s);
      }
      case Op::unregister_stream: {
        const int d = pick_device();
        const StreamHandle s = kStreams[1 + in_.below(std::size(kStreams) - 1)];
        note("unregister_stream dev %d stream %#zx", d, std::size_t(s));
        return use(d).unregister_stream(s);
      }
      case Op::memory_info: return memory_info();
      case Op::reset: return reset();
      case Op::offload: return offload();
      case Op::count_: break;
    }
  }

  void allocate() {
    const int d = pick_device();
    const StreamHandle s = pick_stream();
    const std::size_t size = pick_size();
    void* p = reinterpret_cast<void*>(1);
    const Error e = use(d).allocate(size, s, &p);
    note("allocate dev %d stream %#zx size %zu -> %s %p", d, std::size_t(s), size,
         error_name(e), p);
    if (e != Error::ok) {
      expect(p == nullptr, "a failed allocation left a pointer behind");
      expect(e == Error::out_of_memory || e == Error::device_error ||
                 e == Error::invalid_value,
             "allocation failed with an unexpected error: " + name(e));
      return;
    }
    if (size == 0) return expect(p == nullptr, "a 0-byte allocation gave a pointer");
    expect(p != nullptr, "a successful allocation gave no pointer");
    // With the host tier a request larger than the device is served (partly from the host).
    expect(size <= kCapacity || use(d).settings().offload == Offload::host,
           "an allocation larger than the device succeeded without the host tier");
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    expect(addr % 256 == 0, "an allocation is not 256-byte aligned");
    if (const Allocation* other = heap_.overlapping(addr, size)) {
      violation("allocation overlaps live allocation " + std::to_string(other->tag));
    }
    if (const Allocation* held = quarantine_.pending_overlap(addr, size)) {
      violation("allocation reuses memory of allocation " + std::to_string(held->tag) +
                " before the streams named by record_stream finished with it");
    }
    Allocation a;
    a.addr = addr;
    a.size = size;
    a.device = d;
    a.stream = s;
    a.tag = next_tag_++;
    write_pattern(a);
    heap_.add(a);
  }

  void free_live(DeviceAllocator::FreeOrder order) {
    Allocation* live = pick_live();
    if (live == nullptr) return;
    const std::string damage = check_pattern(*live);
    if (!damage.empty()) violation(damage);
    const Allocation a = heap_.remove(live->addr);
    void* p = reinterpret_cast<void*>(a.addr);
    const Error e = use(a.device).deallocate(p, order);
    note("free%s dev %d %p (allocation %llu) -> %s",
         order == DeviceAllocator::FreeOrder::device ? "(device order)" : "", a.device, p,
         static_cast<unsigned long long>(a.tag), error_name(e));
    // A free of a live pointer always takes effect; a device error while ordering it (an
    // event that cannot be made) may be reported, but the pointer is gone either way.
    expect(e == Error::ok || e == Error::device_error,
           "free of a live pointer failed: " + name(e));
    expect(!use(a.device).owns(p), "a freed pointer is still owned");
    if (order == DeviceAllocator::FreeOrder::stream && !a.uses.empty()) quarantine_.hold(a);
    remember_freed(a.device, a.addr);
  }

  void remember_freed(int device, std::uintptr_t addr) {
    freed_.push_back({device, addr});
    if (freed_.size() > kFreedKept) freed_.pop_front();
  }

  // A free that must be refused and change nothing.
  void expect_refused_free(int d, void* p, const char* what) {
    const auto before = use(d).stats().allocated_count.current;
    const Error e = use(d).deallocate(p);
    note("%s dev %d %p -> %s", what, d, p, error_name(e));
    expect(e == Error::invalid_pointer, std::string(what) + " was not refused: " + name(e));
    expect(use(d).stats().allocated_count.current == before,
           std::string(what) + " changed the allocated count");
  }

  void double_free() {
    if (freed_.empty()) return;
    const auto [d, addr] = freed_[in_.below(freed_.size())];
    if (heap_.starting_at(addr) != nullptr) return;  // handed out again since: live now
    expect_refused_free(d, reinterpret_cast<void*>(addr), "double free");
  }

  void foreign_free() {
    static char host_buffer[4096];
    int on_stack = 0;
    void* const candidates[] = {&on_stack, host_buffer, reinterpret_cast<void*>(1),
                                reinterpret_cast<void*>(~std::uintptr_t{0} - 4095),
                                reinterpret_cast<void*>(std::uintptr_t{0xdead0000})};
    const int d = pick_device();
    expect_refused_free(d, candidates[in_.below(std::size(candidates))], "foreign free");
  }

  void interior_free() {
    const Allocation* live = pick_live();
    if (live == nullptr || live->size < 2) return;
    const std::size_t offset = 1 + in_.below(live->size - 1);
    expect_refused_free(live->device, reinterpret_cast<void*>(live->addr + offset),
                        "interior free");
  }

  void wrong_device_free() {
    const Allocation* live = pick_live();
    if (live == nullptr) return;
    void* p = reinterpret_cast<void*>(live->addr);
    expect_refused_free(1 - live->device, p, "free on the wrong device");
    expect(use(live->device).owns(p), "a free on the wrong device freed the pointer");
  }

  void record_stream() {
    Allocation* live = pick_live();
    if (live == nullptr) return;
    const StreamHandle s = pick_stream();
    const Error e = use(live->device).record_stream(reinterpret_cast<void*>(live->addr), s);
    note("record_stream dev %d %#zx stream %#zx -> %s", live->device, std::size_t(live->addr),
         std::size_t(s), error_name(e));
    expect(e == Error::ok, "record_stream of a live pointer failed: " + name(e));
    if (s != live->stream && std::find(live->uses.begin(), live->uses.end(), s) == live->uses.end()) {
      live->uses.push_back(s);
    }
  }

  void record_stream_foreign() {
    const int d = pick_device();
    int on_stack = 0;
    const Error e = use(d).record_stream(&on_stack, pick_stream());
    note("record_stream of a foreign pointer dev %d -> %s", d, error_name(e));
    expect(e == Error::invalid_pointer, "record_stream of a foreign pointer: " + name(e));
  }

  void set_limit() {
    static constexpr std::size_t kLimits[] = {0, 4 * MiB, 8 * MiB, 16 * MiB, 31 * MiB,
                                              std::size_t{1} << 60};
    const int d = pick_device();
    const std::size_t limit = kLimits[in_.below(std::size(kLimits))];
    note("set_memory_limit dev %d %zu", d, limit);
    expect(use(d).set_memory_limit(limit) == Error::ok, "set_memory_limit failed");
  }

  void set_fraction() {
    static constexpr double kFractions[] = {0.0, -1.0, 0.25, 0.5, 1.0, 1.5,
                                            std::numeric_limits<double>::quiet_NaN()};
    const int d = pick_device();
    const double f = kFractions[in_.below(std::size(kFractions))];
    const Error e = use(d).set_memory_fraction(f);
    note("set_memory_fraction dev %d %g -> %s", d, f, error_name(e));
    const bool valid = f > 0.0 && f <= 1.0;
    expect(e == (valid ? Error::ok : Error::invalid_value), "set_memory_fraction: " + name(e));
  }

  void inject_fault() {
    static constexpr Status kStatuses[] = {Status::out_of_memory, Status::device_error,
                                           Status::invalid_value};
    const auto kind = static_cast<CallKind>(in_.below(device::kCallKinds));
    const int nth = 1 + static_cast<int>(in_.below(8));
    const Status status = kStatuses[in_.below(std::size(kStatuses))];
    note("fail_call %s nth %d with %s", device::call_kind_name(kind), nth,
         device::status_name(status));
    fake_.fail_call(kind, nth, status);
    if (kind == CallKind::event_destroy) ++destroy_faults_;
  }

  void memory_info() {
    const int d = pick_device();
    std::size_t free_bytes = 0, total = 0;
    const Error e = use(d).memory_info(&free_bytes, &total);
    note("memory_info dev %d -> %s free %zu total %zu", d, error_name(e), free_bytes, total);
    expect(e == Error::ok, "memory_info failed: " + name(e));
    expect(free_bytes <= total, "memory_info: more free than total");
    // PyTorch's cacheInfo (cuDNN sizes its workspace with it) reads the largest cached block;
    // it settles kept frees first, so the state after it is validated like any other step's.
    const std::size_t largest = use(d).largest_free_block();
    const auto reserved = static_cast<std::size_t>(use(d).stats().reserved_bytes.current);
    note("largest_free_block dev %d -> %zu (reserved %zu)", d, largest, reserved);
    expect(largest <= reserved, "largest_free_block: larger than what is reserved");
  }

  void reset() {
    const int d = pick_device();
    note("reset dev %d (faults cleared first)", d);
    // reset() forgets every segment even if the driver refuses to free it, as it may: on a
    // real device cudaDeviceReset frees them all. FakeDevice has no reset, so a refused free
    // would stay "used" there and read as a leak at the end; reset runs without faults.
    fake_.clear_faults();
    expect(use(d).reset() == Error::ok, "reset failed");
    // Every pointer of the device is invalid now; their memory went back to the device.
    for (std::uintptr_t addr : heap_.addresses()) {
      if (heap_.starting_at(addr)->device == d) heap_.remove(addr);
    }
    quarantine_.forget(d);
    freed_.clear();
  }

  // Moves between the tiers: whatever the result, the allocation keeps its address and every
  // byte (also when a fault hits the middle of a move), and its bytes lie on one side or the
  // other.
  void offload() {
    Allocation* live = pick_live();
    if (live == nullptr) return;
    const Allocation a = *live;
    void* p = reinterpret_cast<void*>(a.addr);
    const StreamHandle s = pick_stream();
    const std::size_t what = in_.below(4);
    static constexpr const char* kWhat[] = {"offload", "prefetch", "promote", "residency"};
    Error e = Error::ok;
    std::size_t on_device = 0, on_host = 0;
    switch (what) {
      case 0: e = use(a.device).offload(p, s); break;
      case 1: e = use(a.device).prefetch(p, s); break;
      case 2: e = use(a.device).promote(); break;
      default: e = use(a.device).residency(p, &on_device, &on_host); break;
    }
    note("%s dev %d %p (allocation %llu) stream %#zx -> %s", kWhat[what], a.device, p,
         static_cast<unsigned long long>(a.tag), std::size_t(s), error_name(e));
    expect(e == Error::ok || e == Error::out_of_memory || e == Error::device_error ||
               e == Error::not_supported,
           std::string(kWhat[what]) + " failed with an unexpected error: " + name(e));
    expect(use(a.device).owns(p), std::string(kWhat[what]) + " lost the allocation");
    if (what == 3 && e == Error::ok) {
      expect(on_device + on_host >= a.size, "residency covers less than the allocation");
    }
    const std::string damage = check_pattern(a);
    if (!damage.empty()) violation(std::string("after ") + kWhat[what] + ": " + damage);
  }

  // ---- checks after every step (validate() on the devices it touched) ----
  void check_all() {
    for (int d = 0; d < kDevices; ++d) {
      const std::string problem = (touched_ >> d) & 1 ? devices_[d]->validate() : std::string();
      if (!problem.empty()) violation("validate() on device " + std::to_string(d) + ": " + problem);
      const auto count = devices_[d]->stats().allocated_count.current;
      expect(count == static_cast<std::int64_t>(heap_.count_on(d)),
             "device " + std::to_string(d) + " counts " + std::to_string(count) +
                 " allocations, the model " + std::to_string(heap_.count_on(d)));
    }
    for (std::uintptr_t addr : heap_.addresses()) {
      const Allocation& a = *heap_.starting_at(addr);
      expect(devices_[a.device]->owns(reinterpret_cast<void*>(addr)),
             "live allocation " + std::to_string(a.tag) + " is not owned by its device");
      expect(!devices_[1 - a.device]->owns(reinterpret_cast<void*>(addr)),
             "live allocation " + std::to_string(a.tag) + " is owned by the other device");
    }
  }

  void finish() {
    note("finish: clear faults, complete all work, free everything, empty_cache");
    touched_ = ~0u;
    fake_.clear_faults();
    fake_.complete_all();
    while (heap_.size() > 0) free_live(DeviceAllocator::FreeOrder::stream);
    for (int d = 0; d < kDevices; ++d) {
      expect(devices_[d]->empty_cache() == Error::ok, "final empty_cache failed");
      check_all();
      const Stats s = devices_[d]->stats();
      expect(s.active_bytes.current == 0, "active bytes left after freeing everything");
      expect(s.reserved_bytes.current == 0, "reserved bytes left after empty_cache");
      expect(s.host_reserved_bytes.current == 0, "host memory left after empty_cache");
      expect(fake_.used_bytes(d) == 0, "device memory leaked on device " + std::to_string(d));
    }
    quarantine_.clear();
    devices_.clear();
    expect(fake_.host_used_bytes() == 0, "host memory leaked");
    expect(fake_.bad_copies() == 0, "a copy read or wrote memory that was not mapped");
    expect(fake_.live_events() <= destroy_faults_,
           "events leaked: " + std::to_string(fake_.live_events()) + " left, " +
               std::to_string(destroy_faults_) + " event_destroy faults injected");
  }

  ByteStream& in_;
  FakeDevice fake_;
  std::vector<std::unique_ptr<DeviceAllocator>> devices_;
  ShadowHeap heap_;
  Quarantine quarantine_;
  std::deque<std::pair<int, std::uintptr_t>> freed_;
  std::deque<std::string> recent_;
  std::uint64_t next_tag_ = 1;
  std::size_t destroy_faults_ = 0;
  unsigned touched_ = ~0u;  // devices the current step used (bit per device)
};

}  // namespace
}  // namespace cudalloc::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cudalloc::fuzz::ByteStream in(data, size);
  cudalloc::fuzz::OpFuzzer(in).run();
  return 0;
}
