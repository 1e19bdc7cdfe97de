// Text helpers of the rules' wording: numbers, counts, sizes, seconds and signal names in
// the plain sentences of titles, fixes and whys.
#pragma once

#include <string>

namespace dldoctor::analyze {

/// "%.3g"-style number for plain sentences.
std::string num(double v);

/// "1 worker" / "3 workers": a count and a noun, plural when the count is not one.
std::string count_of(double n, const std::string& noun);

/// "24 MiB", "1.5 GiB", "512 B": a size in the binary units torch and df -h use.
std::string bytes_text(double bytes);

/// "12.5 s" style seconds for titles (whole seconds above 10 s).
std::string seconds(double s);

/// "rank 1 · loader 2" ("Rank 1 · loader 2" with `capital`): a loader of a multi-rank job,
/// numbered among its rank's loaders; "loader N" / "Loader N" when rank < 0 (no ranks).
std::string loader_label(int rank, int loader, bool capital = false);

/// Signal number to name: 9 -> "SIGKILL"; "signal N" when unnamed.
std::string signal_name(int signal);

}  // namespace dldoctor::analyze
