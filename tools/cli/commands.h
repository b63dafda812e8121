// Subcommands of the `cudalloc` tool. Each takes the arguments after its name and returns the
// process exit code: 0 success, 1 failure of the work itself, 2 bad usage or bad input.
#pragma once

#include <string>
#include <vector>

namespace cudalloc::cli {

using Args = std::vector<std::string>;

int options_command(const Args& args);
int replay_command(const Args& args);
int inspect_command(const Args& args);
int convert_command(const Args& args);
int view_command(const Args& args);
int diff_command(const Args& args);

}  // namespace cudalloc::cli
