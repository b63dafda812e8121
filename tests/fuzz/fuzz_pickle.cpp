// Fuzz target: the pickle reader (snapshot/pickle.h), on raw bytes.
//
// Properties checked, beyond "does not crash, hang or exhaust memory" under ASan/UBSan:
//   - a refused input comes with a message that starts with "pickle:" and names a byte
//     offset inside the input;
//   - an accepted input gives a document that survives a pickle round trip
//     (json_to_pickle, then pickle_to_json), as doc_compare.h defines it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "doc_compare.h"
#include "snapshot/pickle.h"

namespace {

// The offset in "... at byte N", or -1 when the message has none.
long long byte_offset(const std::string& message) {
  const auto at = message.rfind(" at byte ");
  if (at == std::string::npos) return -1;
  return std::atoll(message.c_str() + at + 9);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc;
  std::string error;
  if (!cudalloc::snapshot::pickle_to_json(input, &doc, &error)) {
    const long long offset = byte_offset(error);
    if (error.rfind("pickle: ", 0) != 0 || offset < 0 || offset > (long long)size) {
      std::fprintf(stderr, "fuzz_pickle: refusal without a usable position: '%s'\n",
                   error.c_str());
      std::abort();
    }
    return 0;
  }
  cudalloc::fuzz::check_pickle_round_trip(doc, "fuzz_pickle");
  return 0;
}
