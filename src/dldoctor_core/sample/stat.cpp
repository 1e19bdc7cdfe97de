#include "dldoctor_core/sample/stat.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

std::optional<StatFields> parse_stat(std::string_view text) noexcept {
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  StatFields f;
  f.comm.assign(text.substr(open + 1, close - open - 1));
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty() || rest.front() == '\n') return std::nullopt;
  f.state = rest.front();
  rest.remove_prefix(1);
  auto ppid = take_int(rest);
  if (!ppid) return std::nullopt;
  f.ppid = int(*ppid);

  // Fields 5.. are positional and some are signed (tpgid -1, priority, nice): walk the tokens
  // and parse only the ones we keep.
  for (int field = 5; field <= 24; ++field) {
    size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos || rest[start] == '\n') break;  // cut short
    size_t end = rest.find_first_of(" \n", start);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view token = rest.substr(start, end - start);
    rest.remove_prefix(end);
    std::optional<int64_t>* slot = nullptr;
    switch (field) {
      case 10: slot = &f.minor_faults; break;
      case 12: slot = &f.major_faults; break;
      case 14: slot = &f.utime_ticks; break;
      case 15: slot = &f.stime_ticks; break;
      case 20: slot = &f.num_threads; break;
      case 22: slot = &f.start_ticks; break;
      case 24: slot = &f.rss_pages; break;
      default: break;
    }
    if (slot == nullptr) continue;
    auto v = take_int(token);
    if (v && token.empty()) *slot = v;  // a token cut mid-way by a short read stays a number,
                                        // but "12x" is not one
  }
  return f;
}

}  // namespace dldoctor::sample
