// `cudalloc replay TRACE... [--conf CONF] [--capacity BYTES] [--policy P] [--json] [--table]
//                           [--skip-inconsistent]`
// Replays the alloc / free_completed events of each trace through cudalloc on a simulated
// device and, for comparison in the same run, through models of PyTorch's allocator, native
// and with expandable segments.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "api/options.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/usage.h"
#include "replay/plan.h"
#include "replay/runner.h"
#include "snapshot/snapshot_json.h"
#include "util/units.h"

namespace cudalloc::cli {
namespace {

using nlohmann::json;

struct ReplayArgs {
  std::vector<std::string> traces;
  std::string conf;
  std::uint64_t capacity = std::uint64_t{1} << 40;
  std::string policy = "all";
  bool json_out = false;
  bool table = false;
  bool skip_inconsistent = false;
  std::string snapshot;  // where to write cudalloc's state after the replay
  bool device_order = false;
  bool progress = false;  // report progress even when stderr is not a terminal
};

constexpr const char* kUsage =
    "usage: cudalloc replay TRACE... [--conf CONF] [--capacity BYTES] [--json] [--table]\n"
    "       [--policy cudalloc|pytorch|expandable|both|all] [--skip-inconsistent]\n"
    "       [--device-order] [--snapshot PATH] [--progress]\n"
    "  TRACE: a snapshot with device_traces (JSON, .json.gz or PyTorch pickle) or an RMM log\n"
    "  --conf      CUDALLOC_CONF settings for cudalloc (default: none)\n"
    "  --capacity  simulated device memory (default 1T: no out-of-memory); the allocations\n"
    "              that fail are counted per policy, their frees skipped\n"
    "  --policy    which allocators to replay: cudalloc, pytorch (PyTorch's native rules),\n"
    "              expandable (PyTorch's expandable_segments:True rules), both (cudalloc and\n"
    "              pytorch) or all (the default: the three)\n"
    "  --json      one JSON object per trace\n"
    "  --table     one Markdown table row per trace, with PyTorch's own figures\n"
    "  --skip-inconsistent  skip frees of unknown addresses and double allocs, and count them\n"
    "  --device-order       free as cudaFree does under LD_PRELOAD (device-ordered, fenced)\n"
    "  --snapshot PATH      write cudalloc's state after the last event as a JSON snapshot\n"
    "                       (with its trace when --conf has trace:N); one trace only\n"
    "  --progress           report each step and the percent of TRACE read on stderr even\n"
    "                       when it is not a terminal (it is shown on a terminal anyway;\n"
    "                       never on stdout)\n"
    CUDALLOC_INPUT_OPTIONS_USAGE;

// The policies `--policy` names, in the order they are replayed and printed; none if unknown.
std::vector<std::string> policies_of(const std::string& policy) {
  if (policy == "all") return {"cudalloc", "pytorch", "expandable"};
  if (policy == "both") return {"cudalloc", "pytorch"};
  if (policy == "cudalloc" || policy == "pytorch" || policy == "expandable") return {policy};
  return {};
}

// False on a missing or unknown argument; a wrong value sets *bad to its argument_error.
bool parse_args(const Args& args, ReplayArgs* r, int* bad) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--json") {
      r->json_out = true;
    } else if (a == "--table") {
      r->table = true;
    } else if (a == "--skip-inconsistent") {
      r->skip_inconsistent = true;
    } else if (a == "--device-order") {
      r->device_order = true;
    } else if (a == "--progress") {
      r->progress = true;
    } else if (a == "--snapshot" && has_value) {
      r->snapshot = args[++i];
    } else if (a == "--conf" && has_value) {
      r->conf = args[++i];
    } else if (a == "--capacity" && has_value) {
      std::size_t bytes = 0;
      if (!parse_bytes(args[++i], &bytes) || bytes == 0) {
        *bad = argument_error("replay", "--capacity '" + args[i] + "'",
                              "a size above 0 such as 80G or 512M");
        return false;
      }
      r->capacity = bytes;
    } else if (a == "--policy" && has_value) {
      r->policy = args[++i];
      if (policies_of(r->policy).empty()) {
        *bad = argument_error("replay", "--policy '" + r->policy + "'",
                              "cudalloc, pytorch, expandable, both or all");
        return false;
      }
    } else if (!a.empty() && a[0] == '-') {
      return false;
    } else {
      r->traces.push_back(a);
    }
  }
  if (!r->snapshot.empty() && r->traces.size() > 1) {
    *bad = argument_error("replay", "--snapshot with " + std::to_string(r->traces.size()) +
                                        " traces", "one trace (the snapshot is of its end state)");
    return false;
  }
  return !r->traces.empty();
}

// One policy's results summed over the devices of a trace.
struct PolicySum {
  replay::PolicyResult r;  // all fields summed but the ns per event (and the first failure's)
  double ns = 0;           // replay_ns_per_event times the device's ops, summed
  double device_ns = 0;    // device_ns_per_event likewise
  int first_failed_device = 0;
};

// Adds the result of device `device`'s `ops` operations to the sum.
void add_result(const replay::PolicyResult& r, int device, std::size_t ops, PolicySum* sum) {
  replay::PolicyResult& s = sum->r;
  if (s.oom_events == 0 && r.oom_events > 0) {
    s.first_failed_size = r.first_failed_size;
    s.first_failed_event = r.first_failed_event;
    sum->first_failed_device = device;
  }
  s.peak_reserved_bytes += r.peak_reserved_bytes;
  s.final_reserved_bytes += r.final_reserved_bytes;
  s.served_peak_live_bytes += r.served_peak_live_bytes;
  s.device_allocs += r.device_allocs;
  s.device_frees += r.device_frees;
  s.oom_events += r.oom_events;
  s.page_maps += r.page_maps;
  s.page_unmaps += r.page_unmaps;
  s.late_page_maps += r.late_page_maps;
  s.late_page_unmaps += r.late_page_unmaps;
  s.page_waits += r.page_waits;
  s.fences += r.fences;
  s.paged = r.paged;
  if (s.problem.empty()) s.problem = r.problem;
  sum->ns += r.replay_ns_per_event * double(ops);
  sum->device_ns += r.device_ns_per_event * double(ops);
}

// Fragmentation is peak reserved over the peak of what the policy had live: the trace's peak
// live, or less when allocations failed (they never lived), so never below 1.
json policy_json(const PolicySum& sum) {
  const replay::PolicyResult& p = sum.r;
  const std::uint64_t live = p.served_peak_live_bytes;
  json j = {{"peak_reserved_bytes", p.peak_reserved_bytes},
            {"final_reserved_bytes", p.final_reserved_bytes},
            {"fragmentation", live ? double(p.peak_reserved_bytes) / double(live) : 0.0},
            {"served_peak_live_bytes", live},
            {"device_allocs", p.device_allocs},
            {"device_frees", p.device_frees},
            {"oom_events", p.oom_events},
            {"replay_ns_per_event", p.replay_ns_per_event}};
  if (p.oom_events > 0) {
    j["first_failed"] = {{"size", p.first_failed_size},
                         {"event", p.first_failed_event},
                         {"device", sum.first_failed_device}};
  }
  if (p.policy != "pytorch") {  // pages: cudalloc's paged segments, expandable segments
    j["page_maps"] = p.page_maps;
    j["page_unmaps"] = p.page_unmaps;
    j["late_page_maps"] = p.late_page_maps;
    j["late_page_unmaps"] = p.late_page_unmaps;
  }
  if (p.policy == "cudalloc") {
    j["paged"] = p.paged;
    j["page_waits"] = p.page_waits;
    j["fences"] = p.fences;
    j["simulated_device_ns_per_event"] = p.device_ns_per_event;
  }
  if (!p.problem.empty()) j["invariant_violation"] = p.problem;
  return j;
}

// Replays one device's plan through policy `name`; cudalloc's end state joins *states.
replay::PolicyResult run_policy(const std::string& name, const replay::Plan& plan,
                                const ReplayArgs& args, const Settings& settings,
                                std::vector<DeviceState>* states) {
  if (name == "pytorch") return replay::run_pytorch(plan, args.capacity);
  if (name == "expandable") return replay::run_expandable(plan, args.capacity);
  DeviceState state;
  replay::PolicyResult r =
      replay::run_cudalloc(plan, settings, args.capacity, &state, args.device_order);
  states->push_back(std::move(state));
  return r;
}

// PyTorch's own figures for the workload, when the trace's meta carries them.
void add_reported(const json& meta, std::uint64_t peak_live, json* out) {
  if (!meta.is_object()) return;
  for (const char* mode : {"native", "expandable_segments"}) {
    auto m = meta.find(mode);
    if (m == meta.end() || !m->contains("peak_reserved")) continue;
    const auto reserved = (*m)["peak_reserved"].get<std::uint64_t>();
    (*out)["pytorch_reported"][mode] = {
        {"peak_reserved_bytes", reserved},
        {"fragmentation", peak_live ? double(reserved) / double(peak_live) : 0.0}};
  }
  if (meta.contains("workload")) (*out)["workload"] = meta["workload"];
}

// Replays one trace; returns the process exit code (0, or 2 for bad input).
int replay_one(const ReplayArgs& args, const Settings& settings, const std::string& path,
               const Progress& progress, json* out) {
  progress.step("parsing " + path);
  const auto t0 = std::chrono::steady_clock::now();
  snapshot::TraceFile trace;
  std::string error;
  if (!snapshot::read_trace(path, &trace, &error)) {  // the error names the path
    std::fprintf(stderr, "cudalloc replay: %s\n", error.c_str());
    return 2;
  }
  const double parse_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *out = {{"trace", path}, {"format", trace.format}, {"parse_seconds", parse_seconds},
          {"events", trace.events.size() + trace.other_events}};
  std::uint64_t peak_live = 0, allocs = 0, frees = 0, skipped = 0;
  const std::vector<std::string> policies = policies_of(args.policy);
  std::map<std::string, PolicySum> sums;
  std::vector<DeviceState> states;
  const std::vector<int> devices = replay::trace_devices(trace.events);
  std::size_t ops = 0;
  for (int device : devices) {
    replay::Plan plan;
    if (!replay::make_plan(trace.events, device, args.skip_inconsistent, &plan, &error)) {
      std::fprintf(stderr, "cudalloc replay: %s: %s\n", path.c_str(), error.c_str());
      return 2;
    }
    peak_live += plan.peak_live_bytes;
    allocs += plan.alloc_events;
    frees += plan.free_events;
    skipped += plan.skipped_events;
    progress.step("device " + std::to_string(device) + ": replaying " +
                  std::to_string(plan.ops.size()) + " operations (" + args.policy + ")");
    ops += plan.ops.size();
    for (const std::string& name : policies) {
      add_result(run_policy(name, plan, args, settings, &states), device, plan.ops.size(),
                 &sums[name]);
    }
  }
  progress.step("replayed " + path);
  (*out)["devices"] = devices.size();
  (*out)["alloc_events"] = allocs;
  (*out)["free_events"] = frees;
  (*out)["skipped_events"] = skipped;
  (*out)["peak_live_bytes"] = peak_live;
  for (const std::string& name : policies) {
    PolicySum& sum = sums[name];
    sum.r.policy = name;  // also without devices
    sum.r.replay_ns_per_event = ops ? sum.ns / double(ops) : 0;
    sum.r.device_ns_per_event = ops ? sum.device_ns / double(ops) : 0;
    (*out)["policies"][name] = policy_json(sum);
  }
  // The headline figures are those of the first policy replayed (cudalloc's if it was).
  const json& main = (*out)["policies"][policies.front()];
  for (const char* k : {"peak_reserved_bytes", "fragmentation", "device_allocs",
                        "replay_ns_per_event", "oom_events"}) {
    (*out)[k] = main[k];
  }
  add_reported(trace.meta, peak_live, out);
  if (!args.snapshot.empty()) {
    std::ofstream file(args.snapshot, std::ios::trunc);
    file << snapshot::snapshot_json(states, args.conf).dump();
    if (!file.good()) {
      std::fprintf(stderr, "cudalloc replay: cannot write %s\n", args.snapshot.c_str());
      return 1;
    }
    file.close();
    report_written(args.snapshot, stderr);  // stdout may be --json
  }
  return 0;
}

// "1 page", "3 pages".
std::string count_of(std::uint64_t n, const char* thing) {
  return std::to_string(n) + " " + thing + (n == 1 ? "" : "s");
}

std::uint64_t u64(const json& j, const char* key) { return j[key].get<std::uint64_t>(); }

// What a policy's device_allocs count (kLegend explains it).
const char* device_alloc_unit(const std::string& policy, const json& p) {
  if (policy == "pytorch") return "segment";
  if (policy == "expandable") return "map";
  return p.value("paged", false) ? "page" : "segment";
}

// One line per policy that had allocations fail: how many, the first, what it means.
void print_failures(const std::string& name, const json& p, bool several_devices) {
  const std::uint64_t failed = u64(p, "oom_events");
  if (failed == 0) return;
  const json& first = p["first_failed"];
  std::string where = "event " + std::to_string(u64(first, "event"));
  if (several_devices) where += " of device " + std::to_string(first["device"].get<int>());
  std::printf("  %s: %s for lack of memory (first: %s at %s); %s skipped; at most %s "
              "live (its fragmentation's base)\n",
              name.c_str(), (count_of(failed, "allocation") + " failed").c_str(),
              format_bytes(u64(first, "size")).c_str(), where.c_str(),
              failed == 1 ? "its free was" : "their frees were",
              format_bytes(u64(p, "served_peak_live_bytes")).c_str());
}

// The pages mapped and unmapped by the policies that map pages.
void print_pages(const json& policies) {
  for (const char* name : {"cudalloc", "expandable"}) {
    const json& p = policies.value(name, json::object());
    if (!p.contains("page_maps")) continue;
    std::printf("  %-10s pages mapped %llu, unmapped %llu (second half of the trace: %llu, %llu)",
                name, p["page_maps"].get<unsigned long long>(),
                p["page_unmaps"].get<unsigned long long>(),
                p["late_page_maps"].get<unsigned long long>(),
                p["late_page_unmaps"].get<unsigned long long>());
    if (p.contains("page_waits")) {
      std::printf(", host waits %llu", p["page_waits"].get<unsigned long long>());
    }
    std::printf("\n");
  }
}

void print_text(const json& r) {
  std::printf("%s: %s events (%s), parsed in %.2f s\n", r["trace"].get<std::string>().c_str(),
              std::to_string(u64(r, "events")).c_str(), r["format"].get<std::string>().c_str(),
              r["parse_seconds"].get<double>());
  std::printf("  peak live %s\n", format_bytes(u64(r, "peak_live_bytes")).c_str());
  if (const auto skipped = u64(r, "skipped_events"); skipped > 0) {
    std::printf("  skipped %s\n", count_of(skipped, "inconsistent event").c_str());
  }
  const json& policies = r["policies"];
  for (const char* name : {"cudalloc", "pytorch", "expandable"}) {
    if (!policies.contains(name)) continue;
    const json& p = policies[name];
    std::printf("  %-10s peak reserved %-11s fragmentation %.3f  device allocs %-14s "
                "%.1f ns/event\n",
                name, format_bytes(u64(p, "peak_reserved_bytes")).c_str(),
                p["fragmentation"].get<double>(),
                count_of(u64(p, "device_allocs"), device_alloc_unit(name, p)).c_str(),
                p["replay_ns_per_event"].get<double>());
    if (p.contains("simulated_device_ns_per_event")) {
      std::printf("  %-10s + %.1f ns/event in the simulated driver's calls\n", "",
                  p["simulated_device_ns_per_event"].get<double>());
    }
  }
  for (const char* name : {"cudalloc", "pytorch", "expandable"}) {
    if (policies.contains(name)) print_failures(name, policies[name], u64(r, "devices") > 1);
  }
  print_pages(policies);
  if (r.contains("pytorch_reported")) {
    for (const auto& [mode, p] : r["pytorch_reported"].items()) {
      std::printf("  PyTorch %s (measured on the GPU): fragmentation %.3f\n", mode.c_str(),
                  p["fragmentation"].get<double>());
    }
  }
}

// Printed once after the text of every trace.
constexpr const char* kLegend =
    "peak live: the largest sum of live allocations in the trace. peak reserved: the most\n"
    "device memory held from the driver. fragmentation = peak reserved / peak live; where\n"
    "allocations failed, / the peak live of what the policy served (the failed ones never\n"
    "lived). device allocs: cudalloc's physical pages created (of page_size, 8 MiB by\n"
    "default; segments with vmm:0), pytorch's segments (cudaMalloc calls), expandable's map\n"
    "calls (of 2 MiB small-pool or 20 MiB large-pool pages). ns/event: the allocator's own\n"
    "host time per replayed event (cudalloc's without the time of the simulated driver's\n"
    "calls, shown apart: the GPU's driver costs far more per call). Second half of the trace:\n"
    "the events after the middle, where a repeating workload is in its steady state.\n";

std::string cell(const json& r, const char* group, const char* name) {
  if (!r.contains(group) || !r[group].contains(name)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", r[group][name]["fragmentation"].get<double>());
  return text;
}

void print_table_header() {
  std::printf("| trace | events | peak live | PyTorch native | PyTorch expandable | "
              "PyTorch rules (replay) | expandable rules (replay) | cudalloc | "
              "cudalloc page maps (2nd half) | cudalloc ns/event | simulated driver ns/event | "
              "PyTorch rules ns/event | expandable rules ns/event |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

void print_table_row(const json& r) {
  const auto ns = [&](const char* policy, const char* key = "replay_ns_per_event") -> std::string {
    if (!r["policies"].contains(policy) || !r["policies"][policy].contains(key)) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", r["policies"][policy][key].get<double>());
    return text;
  };
  std::string maps = "-";
  if (r["policies"].contains("cudalloc") && r["policies"]["cudalloc"].contains("page_maps")) {
    const json& c = r["policies"]["cudalloc"];
    maps = std::to_string(c["page_maps"].get<std::uint64_t>()) + " (" +
           std::to_string(c["late_page_maps"].get<std::uint64_t>()) + ")";
  }
  std::string name = r.value("workload", r["trace"].get<std::string>());
  std::printf("| %s | %llu | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
              name.c_str(),
              static_cast<unsigned long long>(r["events"].get<std::uint64_t>()),
              format_bytes(r["peak_live_bytes"].get<std::uint64_t>()).c_str(),
              cell(r, "pytorch_reported", "native").c_str(),
              cell(r, "pytorch_reported", "expandable_segments").c_str(),
              cell(r, "policies", "pytorch").c_str(), cell(r, "policies", "expandable").c_str(),
              cell(r, "policies", "cudalloc").c_str(), maps.c_str(), ns("cudalloc").c_str(),
              ns("cudalloc", "simulated_device_ns_per_event").c_str(), ns("pytorch").c_str(),
              ns("expandable").c_str());
}

}  // namespace

int replay_command(const Args& args) {
  if (asks_for_help(args)) return print_help(kUsage);
  ReplayArgs r;
  int bad = 0;
  if (!parse_args(args, &r, &bad)) return bad != 0 ? bad : usage_error(kUsage);
  const Progress progress("replay", r.progress);
  Settings settings;
  for (const std::string& w : parse_conf(r.conf, &settings)) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  int status = 0;
  bool printed_text = false;
  if (r.table) print_table_header();
  for (const std::string& trace : r.traces) {
    json result;
    if (int rc = replay_one(r, settings, trace, progress, &result); rc != 0) {
      status = rc;
      continue;
    }
    if (r.json_out) {
      std::printf("%s\n", result.dump().c_str());
    } else if (r.table) {
      print_table_row(result);
    } else {
      print_text(result);
      printed_text = true;
    }
    if (result["policies"].contains("cudalloc") &&
        result["policies"]["cudalloc"].contains("invariant_violation")) {
      std::fprintf(stderr, "cudalloc replay: invariant violated: %s\n",
                   result["policies"]["cudalloc"]["invariant_violation"].get<std::string>().c_str());
      status = 1;
    }
  }
  if (printed_text) std::printf("%s", kLegend);
  return status;
}

}  // namespace cudalloc::cli
