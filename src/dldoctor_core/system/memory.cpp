#include "dldoctor_core/system/memory.hpp"

#include <algorithm>

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

namespace {

// "MemTotal:       24684084 kB" -> bytes.
std::optional<int64_t> meminfo_field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':')
      continue;
    std::string_view rest = trim(line.substr(key.size() + 1));
    int64_t scale = 1;
    if (rest.size() > 3 && rest.substr(rest.size() - 3) == " kB") {
      scale = 1024;
      rest = trim(rest.substr(0, rest.size() - 3));
    }
    auto v = parse_int(rest);
    if (!v) return std::nullopt;
    return *v * scale;
  }
  return std::nullopt;
}

struct Level {
  std::optional<int64_t> limit, usage, inactive_file;
  std::string source;
};

Level read_level(const std::string& dir, bool v2) {
  Level l;
  if (v2) {
    l.source = join_path(dir, "memory.max");
    if (auto t = read_file(l.source)) l.limit = parse_memory_limit(*t);
    l.usage = read_int(join_path(dir, "memory.current"));
    if (auto t = read_file(join_path(dir, "memory.stat")))
      l.inactive_file = parse_stat_field(*t, "inactive_file");
  } else {
    l.source = join_path(dir, "memory.limit_in_bytes");
    if (auto t = read_file(l.source)) l.limit = parse_memory_limit(*t);
    l.usage = read_int(join_path(dir, "memory.usage_in_bytes"));
    if (auto t = read_file(join_path(dir, "memory.stat")))
      l.inactive_file = parse_stat_field(*t, "total_inactive_file");
  }
  return l;
}

}  // namespace

MemoryFacts parse_meminfo(std::string_view text) {
  MemoryFacts f;
  f.total_bytes = meminfo_field(text, "MemTotal");
  f.available_bytes = meminfo_field(text, "MemAvailable");
  f.swap_total_bytes = meminfo_field(text, "SwapTotal");
  f.swap_free_bytes = meminfo_field(text, "SwapFree");
  return f;
}

void read_cgroup_memory(const Cgroups& cgroups, MemoryFacts& facts) {
  std::optional<Level> best;
  std::optional<Level> leaf;
  auto walk = [&](std::string_view controller, bool v2) {
    for (const auto& dir : cgroups.chain(controller)) {
      Level l = read_level(dir, v2);
      if (!leaf && l.usage) leaf = l;
      if (!l.limit) continue;
      // Usage unknown counts as no headroom known: prefer the tighter limit then.
      int64_t headroom = *l.limit - l.usage.value_or(0);
      int64_t best_headroom = best ? *best->limit - best->usage.value_or(0) : 0;
      if (!best || headroom < best_headroom) best = l;
    }
  };
  walk("memory", false);
  walk("", true);
  const Level* chosen = best ? &*best : (leaf ? &*leaf : nullptr);
  if (!chosen) return;
  facts.cgroup_limit_bytes = chosen->limit;
  facts.cgroup_usage_bytes = chosen->usage;
  if (chosen->usage) {
    // The kernel reclaims inactive page cache before it OOM-kills, so it is not real pressure.
    facts.cgroup_working_set_bytes =
        std::max<int64_t>(0, *chosen->usage - chosen->inactive_file.value_or(0));
  }
  facts.cgroup_source = chosen->source;
}

MemoryFacts read_memory(const std::string& proc_root, const Cgroups& cgroups) {
  MemoryFacts f;
  if (auto text = read_file(join_path(proc_root, "meminfo"))) f = parse_meminfo(*text);
  read_cgroup_memory(cgroups, f);
  return f;
}

}  // namespace dldoctor::system
