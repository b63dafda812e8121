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
    "  --capacity  simulated device memory (default 1T: no out-of-memory)\n"
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

json policy_json(const replay::PolicyResult& p, std::uint64_t peak_live) {
  json j = {{"peak_reserved_bytes", p.peak_reserved_bytes},
            {"final_reserved_bytes", p.final_reserved_bytes},
            {"fragmentation", peak_live ? double(p.peak_reserved_bytes) / double(peak_live) : 0.0},
            {"device_allocs", p.device_allocs},
            {"device_frees", p.device_frees},
            {"oom_events", p.oom_events},
            {"replay_ns_per_event", p.replay_ns_per_event}};
  if (p.policy != "pytorch") {  // pages: cudalloc's paged segments, expandable segments
    j["page_maps"] = p.page_maps;
    j["page_unmaps"] = p.page_unmaps;
    j["late_page_maps"] = p.late_page_maps;
    j["late_page_unmaps"] = p.late_page_unmaps;
  }
  if (p.policy == "cudalloc") {
    j["page_waits"] = p.page_waits;
    j["fences"] = p.fences;
  }
  if (!p.problem.empty()) j["invariant_violation"] = p.problem;
  return j;
}

// Adds one device's result to the sum over devices (all but replay_ns_per_event).
void add_result(const replay::PolicyResult& r, replay::PolicyResult* sum) {
  sum->peak_reserved_bytes += r.peak_reserved_bytes;
  sum->final_reserved_bytes += r.final_reserved_bytes;
  sum->device_allocs += r.device_allocs;
  sum->device_frees += r.device_frees;
  sum->oom_events += r.oom_events;
  sum->page_maps += r.page_maps;
  sum->page_unmaps += r.page_unmaps;
  sum->late_page_maps += r.late_page_maps;
  sum->late_page_unmaps += r.late_page_unmaps;
  sum->page_waits += r.page_waits;
  sum->fences += r.fences;
  if (sum->problem.empty()) sum->problem = r.problem;
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
  std::map<std::string, replay::PolicyResult> sums;
  std::map<std::string, double> ns;  // ns/event times ops, summed over devices
  std::vector<DeviceState> states;
  double ops = 0;
  for (int device : replay::trace_devices(trace.events)) {
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
    ops += double(plan.ops.size());
    for (const std::string& name : policies) {
      replay::PolicyResult r;
      if (name == "cudalloc") {
        DeviceState state;
        r = replay::run_cudalloc(plan, settings, args.capacity, &state, args.device_order);
        states.push_back(std::move(state));
      } else {
        r = name == "pytorch" ? replay::run_pytorch(plan, args.capacity)
                              : replay::run_expandable(plan, args.capacity);
      }
      add_result(r, &sums[name]);
      ns[name] += r.replay_ns_per_event * double(plan.ops.size());
    }
  }
  progress.step("replayed " + path);
  (*out)["alloc_events"] = allocs;
  (*out)["free_events"] = frees;
  (*out)["skipped_events"] = skipped;
  (*out)["peak_live_bytes"] = peak_live;
  for (const std::string& name : policies) {
    sums[name].policy = name;  // also without devices
    sums[name].replay_ns_per_event = ops ? ns[name] / ops : 0;
    (*out)["policies"][name] = policy_json(sums[name], peak_live);
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

void print_text(const json& r) {
  std::printf("%s: %s events (%s), parsed in %.2f s\n", r["trace"].get<std::string>().c_str(),
              std::to_string(r["events"].get<std::uint64_t>()).c_str(),
              r["format"].get<std::string>().c_str(), r["parse_seconds"].get<double>());
  std::printf("  peak live %s\n", format_bytes(r["peak_live_bytes"].get<std::uint64_t>()).c_str());
  if (const auto skipped = r["skipped_events"].get<std::uint64_t>(); skipped > 0) {
    std::printf("  skipped %llu inconsistent events\n", static_cast<unsigned long long>(skipped));
  }
  for (const char* name : {"cudalloc", "pytorch", "expandable"}) {
    if (!r["policies"].contains(name)) continue;
    const json& p = r["policies"][name];
    std::printf("  %-10s peak reserved %-12s fragmentation %.3f  device allocs %-6s  %.1f ns/event%s\n",
                name, format_bytes(p["peak_reserved_bytes"].get<std::uint64_t>()).c_str(),
                p["fragmentation"].get<double>(),
                std::to_string(p["device_allocs"].get<std::uint64_t>()).c_str(),
                p["replay_ns_per_event"].get<double>(),
                p["oom_events"].get<std::uint64_t>() ? "  (allocations failed: see oom_events)" : "");
  }
  if (const json& c = r["policies"].value("cudalloc", json::object()); c.contains("page_maps")) {
    std::printf("  cudalloc   pages mapped %llu, unmapped %llu (second half of the trace: %llu, "
                "%llu), host waits %llu\n",
                c["page_maps"].get<unsigned long long>(), c["page_unmaps"].get<unsigned long long>(),
                c["late_page_maps"].get<unsigned long long>(),
                c["late_page_unmaps"].get<unsigned long long>(),
                c["page_waits"].get<unsigned long long>());
  }
  if (const json& e = r["policies"].value("expandable", json::object()); e.contains("page_maps")) {
    std::printf("  expandable pages mapped %llu, unmapped %llu (second half of the trace: %llu, "
                "%llu)\n",
                e["page_maps"].get<unsigned long long>(), e["page_unmaps"].get<unsigned long long>(),
                e["late_page_maps"].get<unsigned long long>(),
                e["late_page_unmaps"].get<unsigned long long>());
  }
  if (r.contains("pytorch_reported")) {
    for (const auto& [mode, p] : r["pytorch_reported"].items()) {
      std::printf("  PyTorch %s (measured on the GPU): fragmentation %.3f\n", mode.c_str(),
                  p["fragmentation"].get<double>());
    }
  }
}

std::string cell(const json& r, const char* group, const char* name) {
  if (!r.contains(group) || !r[group].contains(name)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", r[group][name]["fragmentation"].get<double>());
  return text;
}

void print_table_header() {
  std::printf("| trace | events | peak live | PyTorch native | PyTorch expandable | "
              "PyTorch rules (replay) | expandable rules (replay) | cudalloc | "
              "cudalloc page maps (2nd half) | cudalloc ns/event | PyTorch rules ns/event | "
              "expandable rules ns/event |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

void print_table_row(const json& r) {
  const auto ns = [&](const char* policy) -> std::string {
    if (!r["policies"].contains(policy)) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", r["policies"][policy]["replay_ns_per_event"].get<double>());
    return text;
  };
  std::string maps = "-";
  if (r["policies"].contains("cudalloc") && r["policies"]["cudalloc"].contains("page_maps")) {
    const json& c = r["policies"]["cudalloc"];
    maps = std::to_string(c["page_maps"].get<std::uint64_t>()) + " (" +
           std::to_string(c["late_page_maps"].get<std::uint64_t>()) + ")";
  }
  std::string name = r.value("workload", r["trace"].get<std::string>());
  std::printf("| %s | %llu | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name.c_str(),
              static_cast<unsigned long long>(r["events"].get<std::uint64_t>()),
              format_bytes(r["peak_live_bytes"].get<std::uint64_t>()).c_str(),
              cell(r, "pytorch_reported", "native").c_str(),
              cell(r, "pytorch_reported", "expandable_segments").c_str(),
              cell(r, "policies", "pytorch").c_str(), cell(r, "policies", "expandable").c_str(),
              cell(r, "policies", "cudalloc").c_str(), maps.c_str(), ns("cudalloc").c_str(),
              ns("pytorch").c_str(), ns("expandable").c_str());
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
    }
    if (result["policies"].contains("cudalloc") &&
        result["policies"]["cudalloc"].contains("invariant_violation")) {
      std::fprintf(stderr, "cudalloc replay: invariant violated: %s\n",
                   result["policies"]["cudalloc"]["invariant_violation"].get<std::string>().c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace cudalloc::cli
