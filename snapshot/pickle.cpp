#include "snapshot/pickle.h"

#include "snapshot/input_file.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <variant>
#include <vector>

namespace cudalloc::snapshot {
namespace {

using nlohmann::json;

// ---- Reading ----------------------------------------------------------------------------
// The pickle machine builds Python objects with reference semantics (the memo shares them),
// so values are nodes behind shared pointers until the end, then become JSON.

struct Node;
using Ref = std::shared_ptr<Node>;
struct Mark {};
struct List {
  std::vector<Ref> items;
  bool tuple = false;
};
struct Dict {
  std::vector<std::pair<Ref, Ref>> items;
};
struct Node {
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, List, Dict,
               Mark>
      value;
};

Ref make(auto value) {
  auto n = std::make_shared<Node>();
  n->value = std::move(value);
  return n;
}

class Unpickler {
 public:
  explicit Unpickler(const std::string& data) : data_(data) {}
  // A hostile pickle can make reference cycles (a list appended to itself through the memo);
  // emptying every container breaks them, so that the nodes are freed.
  ~Unpickler() {
    for (const Ref& node : containers_) node->value = nullptr;
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  bool run(json* out, std::string* error);

 private:
  bool fail(const std::string& why) {
    error_ = "pickle: " + why + " at byte " + std::to_string(op_at_);
    return false;
  }
  bool need(std::size_t n) {
    // at_ <= size() always; `at_ + n` could wrap around for a length read from the input.
    return n <= data_.size() - at_ ? true : fail("truncated input");
  }
  Ref make_container(auto value) {
    containers_.push_back(make(std::move(value)));
    return containers_.back();
  }
  std::uint64_t read_le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      v |= std::uint64_t(static_cast<unsigned char>(data_[at_ + i])) << (8 * i);
    }
    at_ += n;
    return v;
  }
  bool read_line(std::string* line) {
    const auto end = data_.find('\n', at_);
    if (end == std::string::npos) return fail("truncated input");
    *line = data_.substr(at_, end - at_);
    at_ = end + 1;
    return true;
  }
  bool pop(Ref* out) {
    if (stack_.empty() || std::holds_alternative<Mark>(stack_.back()->value)) {
      return fail("stack underflow");
    }
    *out = stack_.back();
    stack_.pop_back();
    return true;
  }
  bool pop_to_mark(std::vector<Ref>* items) {
    std::size_t i = stack_.size();
    while (i > 0 && !std::holds_alternative<Mark>(stack_[i - 1]->value)) --i;
    if (i == 0) return fail("no MARK on the stack");
    items->assign(stack_.begin() + long(i), stack_.end());
    stack_.resize(i - 1);
    return true;
  }
  bool step(unsigned char op, bool* stop);
  bool step_containers(unsigned char op, bool* handled);
  bool step_scalars(unsigned char op, bool* handled);
  bool step_memo(unsigned char op, bool* handled);
  bool read_memo_index(bool text, bool one_byte, std::size_t* index);
  bool push_long(std::size_t n);
  bool push_string(std::size_t n);
  bool append_to_top(const std::vector<Ref>& items);
  bool set_items_on_top(const std::vector<Ref>& items);
  bool to_json(const Ref& node, json* out, int depth);

  const std::string& data_;
  std::size_t at_ = 0;
  std::size_t op_at_ = 0;
  std::vector<Ref> stack_;
  std::vector<Ref> memo_;
  std::vector<Ref> containers_;  // every list and dict made, to break cycles at the end
  // Nodes to_json may still emit: sharing through the memo can make a document exponentially
  // larger than its pickle ("billion laughs"), so the output is bounded by the input's size.
  std::size_t node_budget_ = 0;
  std::string error_;
};

bool Unpickler::push_long(std::size_t n) {
  if (!need(n)) return false;
  if (n > 8) return fail("integer wider than 8 bytes");
  std::uint64_t v = read_le(n);
  if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);  // sign
  stack_.push_back(make(static_cast<std::int64_t>(v)));
  return true;
}

bool Unpickler::push_string(std::size_t n) {
  if (!need(n)) return false;
  stack_.push_back(make(data_.substr(at_, n)));
  at_ += n;
  return true;
}

bool Unpickler::append_to_top(const std::vector<Ref>& items) {
  if (stack_.empty() || !std::holds_alternative<List>(stack_.back()->value)) {
    return fail("APPEND to something that is not a list");
  }
  auto& list = std::get<List>(stack_.back()->value).items;
  list.insert(list.end(), items.begin(), items.end());
  return true;
}

bool Unpickler::set_items_on_top(const std::vector<Ref>& items) {
  if (items.size() % 2 != 0) return fail("SETITEMS with an odd number of values");
  if (stack_.empty() || !std::holds_alternative<Dict>(stack_.back()->value)) {
    return fail("SETITEM on something that is not a dict");
  }
  auto& dict = std::get<Dict>(stack_.back()->value).items;
  for (std::size_t i = 0; i < items.size(); i += 2) dict.emplace_back(items[i], items[i + 1]);
  return true;
}

bool Unpickler::step_containers(unsigned char op, bool* handled) {
  *handled = true;
  std::vector<Ref> items;
  Ref a, b, c;
  switch (op) {
    case '(': stack_.push_back(make(Mark{})); return true;
    case '}': stack_.push_back(make_container(Dict{})); return true;
    case ']': stack_.push_back(make_container(List{})); return true;
    case ')': stack_.push_back(make_container(List{{}, true})); return true;
    case 0x8f: stack_.push_back(make_container(List{})); return true;  // EMPTY_SET, read as a list
    case 'd':
      if (!pop_to_mark(&items)) return false;
      stack_.push_back(make_container(Dict{}));
      return set_items_on_top(items);
    case 'l': case 't': case 0x91:  // LIST, TUPLE, FROZENSET
      if (!pop_to_mark(&items)) return false;
      stack_.push_back(make_container(List{items, op == 't'}));
      return true;
    case 0x85: if (!pop(&a)) return false; stack_.push_back(make_container(List{{a}, true})); return true;
    case 0x86:
      if (!pop(&b) || !pop(&a)) return false;
      stack_.push_back(make_container(List{{a, b}, true}));
      return true;
    case 0x87:
      if (!pop(&c) || !pop(&b) || !pop(&a)) return false;
      stack_.push_back(make_container(List{{a, b, c}, true}));
      return true;
    case 'a': if (!pop(&a)) return false; return append_to_top({a});
    case 'e': case 0x90:  // APPENDS, ADDITEMS
      return pop_to_mark(&items) && append_to_top(items);
    case 's': if (!pop(&b) || !pop(&a)) return false; return set_items_on_top({a, b});
    case 'u': return pop_to_mark(&items) && set_items_on_top(items);
    default: *handled = false; return true;
  }
}

bool Unpickler::step_scalars(unsigned char op, bool* handled) {
  *handled = true;
  std::string line;
  switch (op) {
    case 'N': stack_.push_back(make(nullptr)); return true;
    case 0x88: stack_.push_back(make(true)); return true;
    case 0x89: stack_.push_back(make(false)); return true;
    case 'J':
      if (!need(4)) return false;
      stack_.push_back(make(std::int64_t(std::int32_t(read_le(4)))));
      return true;
    case 'K': if (!need(1)) return false; stack_.push_back(make(std::int64_t(read_le(1)))); return true;
    case 'M': if (!need(2)) return false; stack_.push_back(make(std::int64_t(read_le(2)))); return true;
    case 0x8a: if (!need(1)) return false; return push_long(read_le(1));
    case 0x8b: if (!need(4)) return false; return push_long(read_le(4));
    case 'I': case 'L': {
      if (!read_line(&line)) return false;
      if (line == "01" || line == "00") { stack_.push_back(make(line == "01")); return true; }
      if (!line.empty() && line.back() == 'L') line.pop_back();
      try { stack_.push_back(make(std::int64_t(std::stoll(line)))); } catch (...) { return fail("bad integer"); }
      return true;
    }
    case 'G': {
      if (!need(8)) return false;
      std::uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(data_[at_ + std::size_t(i)]);
      at_ += 8;
      double d;
      std::memcpy(&d, &bits, sizeof d);
      stack_.push_back(make(d));
      return true;
    }
    case 'F':
      if (!read_line(&line)) return false;
      try { stack_.push_back(make(std::stod(line))); } catch (...) { return fail("bad float"); }
      return true;
    case 'X': case 'B': if (!need(4)) return false; return push_string(read_le(4));
    case 0x8c: case 'C': case 'U': if (!need(1)) return false; return push_string(read_le(1));
    case 0x8d: case 0x8e: if (!need(8)) return false; return push_string(read_le(8));
    case 'T': if (!need(4)) return false; return push_string(read_le(4));
    default: *handled = false; return true;
  }
}

// The memo index argument of PUT/GET (text), BINPUT/BINGET (1 byte) or LONG_ (4 bytes).
bool Unpickler::read_memo_index(bool text, bool one_byte, std::size_t* index) {
  if (text) {
    std::string line;
    if (!read_line(&line)) return false;
    *index = std::size_t(std::atoll(line.c_str()));
    return true;
  }
  if (!need(one_byte ? 1 : 4)) return false;
  *index = read_le(one_byte ? 1 : 4);
  return true;
}

bool Unpickler::step_memo(unsigned char op, bool* handled) {
  *handled = true;
  std::size_t index = 0;
  switch (op) {
    case 0x94:  // MEMOIZE
      if (stack_.empty()) return fail("MEMOIZE on an empty stack");
      memo_.push_back(stack_.back());
      return true;
    case 'q': case 'r': case 'p':  // BINPUT, LONG_BINPUT, PUT
      if (!read_memo_index(op == 'p', op == 'q', &index)) return false;
      if (stack_.empty()) return fail("PUT on an empty stack");
      // Picklers number memo entries from 0, one per PUT: an index past the input's length
      // is hostile (and would make the memo table that large).
      if (index > data_.size()) return fail("memo index too large");
      if (memo_.size() <= index) memo_.resize(index + 1);
      memo_[index] = stack_.back();
      return true;
    case 'h': case 'j': case 'g':  // BINGET, LONG_BINGET, GET
      if (!read_memo_index(op == 'g', op == 'h', &index)) return false;
      if (index >= memo_.size() || !memo_[index]) return fail("GET of an unknown memo entry");
      stack_.push_back(memo_[index]);
      return true;
    default: *handled = false; return true;
  }
}

bool Unpickler::step(unsigned char op, bool* stop) {
  bool handled = false;
  // Each helper returns false on failure (stop) and sets `handled` when the opcode is its own.
  if (!step_containers(op, &handled)) return false;
  if (handled) return true;
  if (!step_scalars(op, &handled)) return false;
  if (handled) return true;
  if (!step_memo(op, &handled)) return false;
  if (handled) return true;
  Ref unused;
  std::vector<Ref> items;
  switch (op) {
    case 0x80: return need(1) && (read_le(1), true);  // PROTO
    case 0x95: return need(8) && (read_le(8), true);  // FRAME: frames are transparent
    case '.': *stop = true; return true;
    case '0': return pop(&unused);
    case '1': return pop_to_mark(&items);
    case '2':
      if (stack_.empty()) return fail("DUP on an empty stack");
      stack_.push_back(stack_.back());
      return true;
    case 'c': case 0x93: case 'R': case 'b': case 0x81: case 0x92: case 'i': case 'o':
      return fail("the pickle holds Python objects, not plain data (opcode " +
                  std::to_string(int(op)) + ")");
    default: return fail("unsupported opcode " + std::to_string(int(op)));
  }
}

bool Unpickler::to_json(const Ref& node, json* out, int depth) {
  if (node_budget_ == 0) return fail("the document is far larger than the pickle (shared lists?)");
  --node_budget_;
  struct Visitor {
    Unpickler& self;
    json* out;
    int depth;
    bool operator()(std::nullptr_t) { *out = nullptr; return true; }
    bool operator()(bool v) { *out = v; return true; }
    bool operator()(std::int64_t v) { *out = v; return true; }
    bool operator()(std::uint64_t v) { *out = v; return true; }
    bool operator()(double v) { *out = v; return true; }
    bool operator()(const std::string& v) { *out = v; return true; }
    bool operator()(const Mark&) { return self.fail("stray MARK"); }
    // A container at depth d (the root's is 0) is at nesting level d + 1; a cycle through
    // the memo is endlessly deep.
    bool nesting_ok() {
      return within_nesting_bound(std::size_t(depth) + 1) || self.fail(nesting_error() + "; a cycle?");
    }
    bool operator()(const List& l) {
      if (!nesting_ok()) return false;
      *out = json::array();
      for (const Ref& item : l.items) {
        json j;
        if (!self.to_json(item, &j, depth + 1)) return false;
        out->push_back(std::move(j));
      }
      return true;
    }
    bool operator()(const Dict& d) {
      if (!nesting_ok()) return false;
      *out = json::object();
      for (const auto& [k, v] : d.items) {
        json key, value;
        if (!self.to_json(k, &key, depth + 1) || !self.to_json(v, &value, depth + 1)) return false;
        // A key that is not a string (a tuple, a number) is named by its JSON text; bytes that
        // are not UTF-8 in it are replaced rather than thrown about.
        (*out)[key.is_string() ? key.get<std::string>()
                               : key.dump(-1, ' ', false, json::error_handler_t::replace)] =
            std::move(value);
      }
      return true;
    }
  };
  return std::visit(Visitor{*this, out, depth}, node->value);
}

bool Unpickler::run(json* out, std::string* error) {
  bool stop = false;
  while (!stop) {
    op_at_ = at_;
    if (at_ >= data_.size()) {
      fail("truncated input (no STOP)");
      break;
    }
    const auto op = static_cast<unsigned char>(data_[at_++]);
    if (!step(op, &stop)) break;
  }
  if (stop) {
    node_budget_ = 16 * data_.size() + 1024;
    Ref result;
    if (pop(&result) && to_json(result, out, 0)) return true;
  }
  *error = error_;
  return false;
}

// ---- Writing ----------------------------------------------------------------------------

void put_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void write_int(std::string& out, std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out.push_back('J');
    put_le(out, static_cast<std::uint32_t>(v), 4);
    return;
  }
  // LONG1: little-endian two's complement in the fewest bytes (at most 8).
  int n = 8;
  while (n > 1) {
    const std::int64_t shifted = v >> (8 * (n - 1) - 1);
    if (shifted != 0 && shifted != -1) break;
    --n;
  }
  out.push_back(static_cast<char>(0x8a));
  out.push_back(static_cast<char>(n));
  put_le(out, static_cast<std::uint64_t>(v), n);
}

void write_value(std::string& out, const json& v);

void write_float(std::string& out, double d) {
  std::uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  out.push_back('G');
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void write_string(std::string& out, const std::string& s) {
  out.push_back('X');
  put_le(out, s.size(), 4);
  out += s;
}

void write_value(std::string& out, const json& v) {
  switch (v.type()) {
    case json::value_t::null: out.push_back('N'); return;
    case json::value_t::boolean: out.push_back(static_cast<char>(v.get<bool>() ? 0x88 : 0x89)); return;
    case json::value_t::number_integer: write_int(out, v.get<std::int64_t>()); return;
    case json::value_t::number_unsigned: {
      const auto u = v.get<std::uint64_t>();
      // Values of 2^63 and above would need 9 bytes; no snapshot field reaches them.
      if (u > std::uint64_t(INT64_MAX)) return write_float(out, double(u));
      return write_int(out, std::int64_t(u));
    }
    case json::value_t::number_float: write_float(out, v.get<double>()); return;
    case json::value_t::string: write_string(out, v.get_ref<const std::string&>()); return;
    case json::value_t::array:
      pickle_open_list(out, !v.empty());
      if (v.empty()) return;
      for (const json& item : v) write_value(out, item);
      pickle_close_list(out);
      return;
    case json::value_t::object:
      pickle_open_dict(out, !v.empty());
      if (v.empty()) return;
      for (const auto& [key, item] : v.items()) {
        write_string(out, key);
        write_value(out, item);
      }
      pickle_close_dict(out);
      return;
    default: out.push_back('N'); return;  // binary and discarded values have no pickle form
  }
}

}  // namespace

bool pickle_to_json(const std::string& data, json* out, std::string* error) {
  return Unpickler(data).run(out, error);
}

std::string json_to_pickle(const json& doc) {
  std::string out;
  pickle_begin(out);
  write_value(out, doc);
  pickle_end(out);
  return out;
}

void pickle_begin(std::string& out) { out += "\x80\x02"; }
void pickle_end(std::string& out) { out.push_back('.'); }
void pickle_value(std::string& out, const json& value) { write_value(out, value); }

// EMPTY_DICT, and MARK when items follow (SETITEMS closes them).
void pickle_open_dict(std::string& out, bool has_items) {
  out.push_back('}');
  if (has_items) out.push_back('(');
}
void pickle_close_dict(std::string& out) { out.push_back('u'); }

// EMPTY_LIST, and MARK when items follow (APPENDS closes them).
void pickle_open_list(std::string& out, bool has_items) {
  out.push_back(']');
  if (has_items) out.push_back('(');
}
void pickle_close_list(std::string& out) { out.push_back('e'); }

}  // namespace cudalloc::snapshot
