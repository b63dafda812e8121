#include "snapshot/values.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

constexpr std::pair<const char*, ValueKind> kEventFields[] = {
    {"addr", ValueKind::address},          {"size", ValueKind::size},
    {"stream", ValueKind::address},        {"reserved_bytes", ValueKind::size},
    {"device_free", ValueKind::size}};
constexpr std::pair<const char*, ValueKind> kSegmentFields[] = {
    {"address", ValueKind::address},        {"stream", ValueKind::address},
    {"device", ValueKind::device},          {"total_size", ValueKind::size},
    {"allocated_size", ValueKind::size},    {"active_size", ValueKind::size},
    {"requested_size", ValueKind::size}};
constexpr std::pair<const char*, ValueKind> kBlockFields[] = {
    {"address", ValueKind::address}, {"size", ValueKind::size}, {"requested_size", ValueKind::size}};
constexpr std::pair<const char*, ValueKind> kDeviceFields[] = {{"device", ValueKind::device}};
constexpr std::pair<const char*, ValueKind> kSlabFields[] = {{"address", ValueKind::address},
                                                             {"bytes", ValueKind::size}};

std::uint64_t max_of(ValueKind kind) {
  switch (kind) {
    case ValueKind::size: return kMaxSize;
    case ValueKind::device: return kMaxDevice;
    case ValueKind::address: break;
  }
  return UINT64_MAX;
}

static_assert(kMaxSize == std::uint64_t{1} << 50, "the message below names 2^50");

std::string range_of(ValueKind kind) {
  const std::string from = "an integer from 0 to ";
  switch (kind) {
    case ValueKind::size: return from + std::to_string(kMaxSize) + " (2^50 bytes, the largest request)";
    case ValueKind::device: return from + std::to_string(kMaxDevice);
    case ValueKind::address: break;
  }
  return from + "2^64 - 1";
}

// The value as JSON text, cut short: it may be a long string or a whole object.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// The fields of `object` that `fields` names, where present.
template <std::size_t N>
bool check_fields(const json& object, const std::pair<const char*, ValueKind> (&fields)[N],
                  std::string* error) {
  std::uint64_t unused = 0;
  for (const auto& [key, kind] : fields) {
    auto f = object.find(key);
    if (f != object.end() && !read_value(*f, kind, key, &unused, error)) return false;
  }
  return true;
}

// Prefixes *error with where it was found; returns false for the caller to pass on.
bool at(const std::string& where, std::string* error) {
  *error = where + ": " + *error;
  return false;
}

// object[key], where present, must be a list whose items `check` accepts (item, where, error).
template <class Check>
bool check_list(const json& object, const char* key, const std::string& where, std::string* error,
                Check check) {
  auto list = object.find(key);
  if (list == object.end()) return true;
  const std::string name = where.empty() ? std::string(key) : where + "." + key;
  if (!list->is_array()) {
    *error = "\"" + name + "\" is not a list";
    return false;
  }
  for (std::size_t i = 0; i < list->size(); ++i) {
    if (!check((*list)[i], name + "[" + std::to_string(i) + "]", error)) return false;
  }
  return true;
}

template <std::size_t N>
auto object_with(const std::pair<const char*, ValueKind> (&fields)[N]) {
  return [&fields](const json& item, const std::string& where, std::string* error) {
    if (!item.is_object()) {
      *error = where + " is not an object";
      return false;
    }
    return check_fields(item, fields, error) || at(where, error);
  };
}

// An entry of cudalloc's own section: its device number and its slabs.
bool check_cudalloc_device(const json& device, const std::string& where, std::string* error) {
  return object_with(kDeviceFields)(device, where, error) &&
         check_list(device, "slabs", where, error, object_with(kSlabFields));
}

bool check_segment(const json& seg, const std::string& where, std::string* error) {
  return object_with(kSegmentFields)(seg, where, error) &&
         check_list(seg, "blocks", where, error, object_with(kBlockFields)) &&
         check_list(seg, "pages", where, error, object_with(kBlockFields));
}

// device_traces: a list per device of events, each named as the trace readers name it.
bool check_device_traces(const json& traces, std::string* error) {
  if (!traces.is_array()) {
    *error = "\"device_traces\" is not a list";
    return false;
  }
  for (std::size_t d = 0; d < traces.size(); ++d) {
    if (!traces[d].is_array()) {
      *error = "device_traces[" + std::to_string(d) + "] is not a list";
      return false;
    }
    for (std::size_t i = 0; i < traces[d].size(); ++i) {
      if (check_event(traces[d][i], error)) continue;
      *error += " (device " + std::to_string(d) + ", event " + std::to_string(i) + ")";
      return false;
    }
  }
  return true;
}

}  // namespace

bool read_value(const json& value, ValueKind kind, const std::string& name, std::uint64_t* out,
                std::string* error) {
  // JSON gives non-negative integers as unsigned, pickles every integer as signed.
  const bool in_range =
      value.is_number_unsigned() ? value.get<std::uint64_t>() <= max_of(kind)
      : value.is_number_integer() ? value.get<std::int64_t>() >= 0 &&
                                        std::uint64_t(value.get<std::int64_t>()) <= max_of(kind)
                                  : false;
  if (in_range) {
    *out = value.get<std::uint64_t>();
    return true;
  }
  *error = "'" + name + "' must be " + range_of(kind) + ", not " + shown(value);
  return false;
}

json number_from_text(const std::string& text) {
  const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
  const bool negative = !hex && text.rfind('-', 0) == 0;
  const std::string digits = text.substr(hex ? 2 : negative ? 1 : 0);
  if (digits.empty() ||
      digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos) {
    return text;
  }
  errno = 0;
  if (negative) {
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    return errno == 0 ? json(std::int64_t(v)) : json(text);
  }
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, hex ? 16 : 10);
  return errno == 0 ? json(std::uint64_t(v)) : json(text);
}

bool check_event(const json& event, std::string* error) {
  if (!event.is_object()) {
    *error = "trace event that is not an object";
    return false;
  }
  auto action = event.find("action");
  if (action == event.end() || !action->is_string()) {
    *error = "trace event without an action";
    return false;
  }
  return check_fields(event, kEventFields, error);
}

bool is_snapshot_keys(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (k == "segments" || k == "device_traces") return true;
  }
  return false;
}

std::string not_a_snapshot(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    if (k == "traceEvents") {
      return "is a profiler trace (Chrome trace format, traceEvents), not a memory snapshot: "
             "record one with torch.cuda.memory._record_memory_history or CUDALLOC_CONF";
    }
  }
  std::string listed;
  for (std::size_t i = 0; i < keys.size() && i < 6; ++i) {
    listed += (i ? ", " : "") + std::string("\"") + keys[i] + "\"";
  }
  if (keys.size() > 6) listed += ", ...";
  return "is not a memory snapshot: a JSON object without \"segments\" or \"device_traces\"" +
         (listed.empty() ? std::string(" (it is empty)") : " (its keys: " + listed + ")");
}

bool check_document(const json& doc, std::string* error) {
  if (!doc.is_object()) return true;
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  if (!is_snapshot_keys(keys)) {
    *error = not_a_snapshot(keys);
    return false;
  }
  if (!check_list(doc, "segments", "", error, check_segment)) return false;
  auto traces = doc.find("device_traces");
  if (traces != doc.end() && !check_device_traces(*traces, error)) return false;
  auto section = doc.find("cudalloc");
  if (section == doc.end() || !section->is_object()) return true;
  return check_list(*section, "devices", "cudalloc", error, check_cudalloc_device);
}

}  // namespace cudalloc::snapshot
