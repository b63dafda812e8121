#include "api/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "util/units.h"

namespace cudalloc {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_double(std::string_view text, double* value) {
  const std::string t(text);
  char* end = nullptr;
  *value = std::strtod(t.c_str(), &end);
  return !t.empty() && end == t.c_str() + t.size();
}

// Helpers that make one table row per Settings field, with the field's range check.
template <std::size_t Settings::*Field, std::size_t Min, std::size_t Max>
bool set_bytes(Settings& s, std::string_view text, std::string* why) {
  std::size_t v = 0;
  if (!parse_bytes(text, &v)) return *why = "expected a size such as 512K, 64M or 8G", false;
  if (v < Min || v > Max) {
    return *why = "expected a size from " + format_bytes_exact(Min) + " to " +
                  format_bytes_exact(Max), false;
  }
  s.*Field = v;
  return true;
}
template <std::size_t Settings::*Field>
std::string get_size(const Settings& s) {
  return std::to_string(s.*Field);
}

template <std::size_t Settings::*Field, std::size_t Min, std::size_t Max>
bool set_count(Settings& s, std::string_view text, std::string* why) {
  std::size_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || v < Min || v > Max) {
    return *why = "expected a whole number from " + std::to_string(Min) + " to " +
                  std::to_string(Max), false;
  }
  s.*Field = v;
  return true;
}

bool set_fraction(Settings& s, std::string_view text, std::string* why) {
  double v = 0;
  if (!parse_double(text, &v) || !(v > 0.0 && v <= 1.0)) {
    return *why = "expected a number in (0, 1], such as 0.5", false;
  }
  s.fraction = v;
  return true;
}
std::string get_fraction(const Settings& s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s.fraction);
  return text;
}

template <double Settings::*Field>
bool set_share(Settings& s, std::string_view text, std::string* why) {
  double v = 0;
  if (!parse_double(text, &v) || !(v >= 0.0 && v <= 1.0)) {
    return *why = "expected a number in [0, 1], such as 0.05", false;
  }
  s.*Field = v;
  return true;
}
template <double Settings::*Field>
std::string get_share(const Settings& s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s.*Field);
  return text;
}

template <bool Settings::*Field>
bool set_boolean(Settings& s, std::string_view text, std::string* why) {
  bool v = false;
  if (!parse_bool(text, &v)) return *why = "expected true/false, on/off or 1/0", false;
  s.*Field = v;
  return true;
}
template <bool Settings::*Field>
std::string get_boolean(const Settings& s) {
  return s.*Field ? "true" : "false";
}

template <std::string Settings::*Field>
bool set_path(Settings& s, std::string_view text, std::string* why) {
  if (text.empty()) return *why = "expected a file path", false;
  s.*Field = std::string(text);
  return true;
}
template <std::string Settings::*Field>
std::string get_path(const Settings& s) {
  return s.*Field;
}

bool set_offload(Settings& s, std::string_view text, std::string* why) {
  const std::string t = lower(text);
  if (t == "none") return s.offload = Offload::none, true;
  if (t == "host") return s.offload = Offload::host, true;
  return *why = "expected none or host", false;
}
std::string get_offload(const Settings& s) {
  return s.offload == Offload::host ? "host" : "none";
}

constexpr std::size_t kNoMax = std::size_t{1} << 60;

}  // namespace

bool parse_bool(std::string_view text, bool* value) {
  const std::string t = lower(trim(text));
  if (t == "1" || t == "true" || t == "on" || t == "yes") return *value = true, true;
  if (t == "0" || t == "false" || t == "off" || t == "no") return *value = false, true;
  return false;
}

std::string echo(std::string_view text) {
  constexpr std::size_t kMax = 64;
  if (text.size() <= kMax) return std::string(text);
  return std::string(text.substr(0, kMax)) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::span<const Option> options() {
  static constexpr Option kTable[] = {
      {"limit", OptionType::bytes,
       "Cap on device memory reserved per device (0: no cap). Requests that would pass it are "
       "served after releasing the cache, or fail as out of memory.",
       set_bytes<&Settings::limit, 0, kNoMax>, get_size<&Settings::limit>},
      {"fraction", OptionType::fraction,
       "Cap on device memory reserved per device, as a fraction of the device's total memory. "
       "With limit, the smaller cap applies.",
       set_fraction, get_fraction},
      {"slab_max", OptionType::bytes,
       "Largest request served from slabs of size classes; larger requests use best-fit "
       "blocks.",
       set_bytes<&Settings::slab_max, 256, 1 << 20>, get_size<&Settings::slab_max>},
      {"large_segment", OptionType::bytes,
       "Size of the shared segments that serve block-pool requests up to half of it; larger "
       "requests get a segment of their own, rounded up to 2 MiB.",
       set_bytes<&Settings::large_segment, 2 << 20, kNoMax>,
       get_size<&Settings::large_segment>},
      {"vmm", OptionType::boolean,
       "Place blocks in virtual address ranges and map physical pages only under blocks in "
       "use, so freed pages serve any later request (needs the driver's virtual memory "
       "management; without it, plain segments are used).",
       set_boolean<&Settings::vmm>, get_boolean<&Settings::vmm>},
      {"page_slack", OptionType::fraction,
       "With vmm: idle mapped pages allowed, as a fraction of reserved memory, before a request "
       "moves an idle page instead of taking new memory. Higher: fewer page moves, more "
       "memory.",
       set_share<&Settings::page_slack>, get_share<&Settings::page_slack>},
      {"remap_growth", OptionType::fraction,
       "With vmm: memory that may be reserved over the peak allocated (since the cache was last "
       "emptied), as a fraction of it, to give new memory to pages that keep losing their "
       "physical page to others (cycles of remaps, in fixed-shape steps and in shapes that "
       "change every step). Higher: fewer remaps, more memory; 0: such pages reuse idle pages "
       "like any other.",
       set_share<&Settings::remap_growth>, get_share<&Settings::remap_growth>},
      {"page_size", OptionType::bytes,
       "With vmm: the unit of physical memory that is created, mapped and moved, rounded up to "
       "a multiple of the driver's granularity (0: the granularity, 2 MiB on current GPUs). "
       "Larger: fewer and cheaper driver calls per byte, memory held in larger units; "
       "smaller: memory held and moved in finer units.",
       set_bytes<&Settings::page_size, 0, std::size_t{1} << 30>,
       get_size<&Settings::page_size>},
      {"offload", OptionType::choice,
       "none or host. host: a request that does not fit the device budget (limit, fraction or "
       "the device) after the cache is released is served from host memory mapped into device "
       "address space, so the program runs on, slower, instead of failing. Live allocations "
       "can be moved between the tiers with cudalloc_offload / cudalloc_prefetch (vmm only).",
       set_offload, get_offload},
      {"host_limit", OptionType::bytes,
       "With offload:host: cap on host memory held by the host tier (0: no cap). Past it, "
       "requests fail as out of memory.",
       set_bytes<&Settings::host_limit, 0, kNoMax>, get_size<&Settings::host_limit>},
      {"promote", OptionType::fraction,
       "With offload:host and vmm: after a free, when all memory in use (on the device and in "
       "host memory) fits in this fraction of the device budget, cudalloc moves what is in "
       "host memory back to the device (0: only when cudalloc_promote is called). Safe only "
       "when no other thread queues work on spilled memory meanwhile (see docs/offload.md).",
       set_share<&Settings::promote>, get_share<&Settings::promote>},
      {"slab_keep", OptionType::count,
       "Empty slabs kept per size class and stream before one is returned to the block pool.",
       set_count<&Settings::slab_keep, 0, 1024>, get_size<&Settings::slab_keep>},
      {"validate", OptionType::boolean,
       "Check every internal invariant after every operation and log violations (slow; for "
       "debugging).",
       set_boolean<&Settings::validate>, get_boolean<&Settings::validate>},
      {"time_device_calls", OptionType::boolean,
       "Time every call into the CUDA driver by kind. Pause and resume then log (info level; "
       "the move itself at debug) the calls and milliseconds of each kind they made, largest "
       "first, and the process logs its totals when it exits (info level). Costs two clock "
       "reads per driver call. Read when the allocator starts.",
       set_boolean<&Settings::time_device_calls>, get_boolean<&Settings::time_device_calls>},
      {"trace", OptionType::count,
       "Keep the last N allocator events per device (alloc, free, segment, oom) for snapshots "
       "(0: no trace). Costs a clock read per event.",
       set_count<&Settings::trace, 0, std::size_t{1} << 28>, get_size<&Settings::trace>},
      {"snapshot_on_oom", OptionType::path,
       "Write a JSON snapshot, with the failed request, to a new file each time an allocation "
       "fails for lack of memory. %p expands to the process id, %n to the error's number in "
       "the process (1, 2, ...); without %n the first file has the name as given and later "
       "ones .2, .3, ... before the extension (oom.json, oom.2.json). An existing file is "
       "never replaced: the snapshot then takes .pPID before the extension (oom.p4242.json).",
       set_path<&Settings::snapshot_on_oom>, get_path<&Settings::snapshot_on_oom>},
      {"snapshot_on_oom_max", OptionType::count,
       "Most snapshot_on_oom files written per process (0: no cap); past it one warning is "
       "logged and later errors write none.",
       set_count<&Settings::snapshot_on_oom_max, 0, std::size_t{1} << 20>,
       get_size<&Settings::snapshot_on_oom_max>},
      {"snapshot_at_exit", OptionType::path,
       "Write a JSON snapshot to this file when the process exits; %p expands to the process "
       "id.",
       set_path<&Settings::snapshot_at_exit>, get_path<&Settings::snapshot_at_exit>},
  };
  return kTable;
}

std::string Option::get(const Settings& settings) const {
  std::string text = value(settings);
  if (type != OptionType::bytes) return text;
  std::size_t bytes = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  const bool number = ec == std::errc() && end == text.data() + text.size();
  return number && bytes != 0 ? format_bytes_exact(bytes) : text;
}

const char* option_type_name(OptionType type) {
  switch (type) {
    case OptionType::bytes: return "bytes";
    case OptionType::fraction: return "fraction";
    case OptionType::count: return "count";
    case OptionType::boolean: return "boolean";
    case OptionType::path: return "path";
    case OptionType::choice: return "choice";
  }
  return "?";
}

namespace {

// The warning for `text`, which option `o` refused for reason `why`: the key, what was expected
// and the value kept in `settings` (the default, or what an earlier item set), in human units.
std::string bad_value(const Option& o, std::string_view text, const std::string& why,
                      const Settings& settings) {
  const bool is_default = o.value(settings) == o.value(Settings{});
  const std::string kept = o.get(settings);
  return "CUDALLOC_CONF: bad value '" + echo(text) + "' for key '" + o.key + "': " + why +
         "; keeping " + (is_default ? "the default, " : "") +
         (kept.empty() ? "none" : echo(kept)) + (is_default ? "" : ", set earlier");
}

}  // namespace

std::vector<std::string> parse_conf(std::string_view conf, Settings* settings) {
  std::vector<std::string> warnings;
  while (!conf.empty()) {
    const auto comma = conf.find(',');
    const std::string_view item = trim(conf.substr(0, comma));
    conf = comma == std::string_view::npos ? std::string_view{} : conf.substr(comma + 1);
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      warnings.push_back("CUDALLOC_CONF: '" + echo(item) + "' is not key:value; ignored");
      continue;
    }
    const std::string key = lower(trim(item.substr(0, colon)));
    const std::string_view value = trim(item.substr(colon + 1));
    const auto table = options();
    auto it = std::find_if(table.begin(), table.end(),
                           [&](const Option& o) { return key == o.key; });
    if (it == table.end()) {
      std::string known;
      for (const Option& o : table) known += (known.empty() ? "" : ", ") + std::string(o.key);
      warnings.push_back("CUDALLOC_CONF: unknown key '" + echo(key) +
                         "' ignored (known keys: " + known + ")");
      continue;
    }
    std::string why;
    if (!it->set(*settings, value, &why)) {
      warnings.push_back(bad_value(*it, value, why, *settings));
    }
  }
  return warnings;
}

std::string options_markdown() {
  const Settings defaults;
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const Option& o : options()) {
    const std::string value = o.get(defaults);
    out += "| `" + std::string(o.key) + "` | " + option_type_name(o.type) + " | " +
           (value.empty() ? std::string("(none)") : "`" + value + "`") + " | " + o.help + " |\n";
  }
  return out;
}

}  // namespace cudalloc
