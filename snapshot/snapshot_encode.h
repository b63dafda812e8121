// Writing a snapshot in another format (cudalloc convert): JSON or PyTorch's pickle. The trace
// events of a JSON input are checked and encoded one by one as they are parsed and never held
// as a document, so a trace of millions of events converts in time and memory linear in its
// size (about the size of the output), where a whole document of them would take gigabytes.
// A pickle input is read whole, as every reader reads pickles.
#pragma once

#include <string>

namespace cudalloc::snapshot {

enum class SnapshotFormat { json, pickle };

// Reads the snapshot at `path` with the checks of read_snapshot (trace_reader.h) and writes
// its encoding in `format` to *out. False with a message that starts with the path.
bool encode_snapshot(const std::string& path, SnapshotFormat format, std::string* out,
                     std::string* error);

}  // namespace cudalloc::snapshot
