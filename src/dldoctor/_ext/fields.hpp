// A struct's plain fields declared once, by name, for both directions of the dict glue (as
// nlohmann::json's NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE): the key is the member's name.
//
//   DLDOCTOR_FIELDS(MemoryFields, total_bytes, available_bytes, cgroup_source);
//   nb::dict d = to_dict<MemoryFields>(facts.memory);       // d["total_bytes"] = opt(...), ...
//   get_fields<MemoryFields>(facts.memory, d, "facts");     // read<int64_t>(d, "total_bytes", ...)
//
// A table names members, not a type: it serves every struct that has them (a series' loader
// and a live sample's alike). Out, an optional is opt() (None when unknown), anything else
// nb::cast; a caller may pass its own `value` for that (a series' lists, the watchdog's ""
// as None). In, each key is read<T>() with the usual messages: an optional member takes what
// is read (nullopt when missing or None); any other member keeps its default unless the dict
// holds a value, and for a string a non-empty one (read_str()'s "" is "unknown").
// Keys that differ from the member, nested dicts and special values stay hand-written.
// Needs the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "optional.hpp"

// DLDOCTOR_FIELDS_EACH(m, a, b, c) is m(a) m(b) m(c): C++20's __VA_OPT__ recursion, rescanned
// 4^3 times (enough for 64 fields).
#define DLDOCTOR_FIELDS_SCAN(...) \
  DLDOCTOR_FSCAN2(DLDOCTOR_FSCAN2(DLDOCTOR_FSCAN2(DLDOCTOR_FSCAN2(__VA_ARGS__))))
#define DLDOCTOR_FSCAN2(...) \
  DLDOCTOR_FSCAN1(DLDOCTOR_FSCAN1(DLDOCTOR_FSCAN1(DLDOCTOR_FSCAN1(__VA_ARGS__))))
#define DLDOCTOR_FSCAN1(...) \
  DLDOCTOR_FSCAN0(DLDOCTOR_FSCAN0(DLDOCTOR_FSCAN0(DLDOCTOR_FSCAN0(__VA_ARGS__))))
#define DLDOCTOR_FSCAN0(...) __VA_ARGS__
#define DLDOCTOR_FIELDS_PARENS ()
#define DLDOCTOR_FIELDS_EACH(m, ...) \
  __VA_OPT__(DLDOCTOR_FIELDS_SCAN(DLDOCTOR_FIELDS_STEP(m, __VA_ARGS__)))
#define DLDOCTOR_FIELDS_STEP(m, a, ...) \
  m(a) __VA_OPT__(DLDOCTOR_FIELDS_AGAIN DLDOCTOR_FIELDS_PARENS(m, __VA_ARGS__))
#define DLDOCTOR_FIELDS_AGAIN() DLDOCTOR_FIELDS_STEP
#define DLDOCTOR_FIELDS_ONE(member) f(#member, [](auto& s) -> auto& { return s.member; });

/// A table `Name` of members: Name::each(f) calls f(key, accessor) for each, in order, where
/// accessor(s) is s.<member> (const when s is).
#define DLDOCTOR_FIELDS(Name, ...)                                  \
  struct Name {                                                     \
    template <typename F>                                           \
    static void each(F&& f) {                                       \
      DLDOCTOR_FIELDS_EACH(DLDOCTOR_FIELDS_ONE, __VA_ARGS__)        \
    }                                                               \
  }

namespace dldoctor::ext {

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

/// What a field is out: an optional as opt() (None when unknown), anything else as itself.
struct PlainValue {
  template <typename T>
  nanobind::object operator()(const T& v) const {
    if constexpr (is_optional<T>::value)
      return opt(v);
    else
      return nanobind::cast(v);
  }
};

/// d[key] = value(s.member) for each field of Table, in its order.
template <typename Table, typename S, typename Value = PlainValue>
void put_fields(nanobind::dict& d, const S& s, Value value = {}) {
  Table::each([&](const char* key, auto member) { d[key] = value(member(s)); });
}

/// A new dict of Table's fields of `s`.
template <typename Table, typename S, typename Value = PlainValue>
nanobind::dict to_dict(const S& s, Value value = {}) {
  nanobind::dict d;
  put_fields<Table>(d, s, value);
  return d;
}

/// m = d[key] (see the top of this file), read as m's type.
template <typename M>
void read_field(M& m, nanobind::handle d, const char* key, const std::string& what, Bad on_bad) {
  if constexpr (is_optional<M>::value) {
    m = read<typename M::value_type>(d, key, what, on_bad);
  } else if (auto v = read<M>(d, key, what, on_bad)) {
    if constexpr (std::is_same_v<M, std::string>) {
      if (v->empty()) return;
    }
    m = std::move(*v);
  }
}

/// Table's fields of `s` from the dict `d` (a `what`, for messages); a missing or None `d`
/// reads as all unknown.
template <typename Table, typename S>
void get_fields(S& s, nanobind::handle d, const std::string& what, Bad on_bad = Bad::kRaise) {
  Table::each([&](const char* key, auto member) { read_field(member(s), d, key, what, on_bad); });
}

/// A default S with Table's fields from `d`.
template <typename S, typename Table>
S from_dict(nanobind::handle d, const std::string& what, Bad on_bad = Bad::kRaise) {
  S s;
  get_fields<Table>(s, d, what, on_bad);
  return s;
}

}  // namespace dldoctor::ext
