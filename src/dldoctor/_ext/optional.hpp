// Unknown is None, both ways: out, an empty std::optional is None; in, a dict field that is
// missing or None is std::nullopt. The one reader of dict fields every area's glue uses, so
// a field of the wrong type says the same one-line thing wherever it is read. Needs the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dldoctor_core/common/error.hpp"

namespace dldoctor::ext {

/// `v` as a Python object, None when it is unknown.
template <typename T>
nanobind::object opt(const std::optional<T>& v) {
  return v ? nanobind::cast(*v) : nanobind::none();
}

/// [to_py(x) for x in xs].
template <typename T, typename F>
nanobind::list list_of(const std::vector<T>& xs, F to_py) {
  nanobind::list out;
  for (const T& x : xs) out.append(to_py(x));
  return out;
}

/// "int", "str", ...: the Python type of `v`, for messages.
std::string py_type(nanobind::handle v);

/// What a field of the wrong type becomes: an error (input a caller builds) or unknown
/// (records from the job's side logs, where a lost note must never end a run).
enum class Bad { kRaise, kUnknown };

/// d[key], or an invalid handle when `d` is not a dict, lacks `key` or holds None there.
nanobind::handle field(nanobind::handle d, const char* key);

/// Raises "<what> must be a dict, got <type>" unless `d` is a dict.
void require_dict(nanobind::handle d, const std::string& what);

/// Raises "<what> field '<key>' must be <kind> or None, got <type>".
[[noreturn]] void bad_field(const std::string& what, const char* key, const char* kind,
                            nanobind::handle v);

/// `v` (the value of field `key` of a `what`) as T: nullopt when invalid or None. int64_t/int
/// take an int, a bool or a finite float (truncated); double a finite number (inf and nan
/// are unknown); bool a bool or an int; std::string a str (anything else as str() of it).
/// Another type: bad_field(), or nullopt under Bad::kUnknown.
template <typename T>
std::optional<T> as(nanobind::handle v, const std::string& what, const char* key,
                    Bad on_bad = Bad::kRaise) {
  namespace nb = nanobind;
  if (!v.is_valid() || v.is_none()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    std::string s;
    if (nb::try_cast(v, s)) return s;
    if (on_bad == Bad::kUnknown) return std::nullopt;
    return nb::cast<std::string>(nb::str(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    bool b;
    int64_t i;
    if (nb::try_cast(v, b)) return b;
    if (nb::try_cast(v, i)) return i != 0;
    if (on_bad == Bad::kUnknown) return std::nullopt;
    bad_field(what, key, "a bool", v);
  } else if constexpr (std::is_floating_point_v<T>) {
    double x;
    if (nb::try_cast(v, x)) return std::isfinite(x) ? std::optional<T>(T(x)) : std::nullopt;
    if (on_bad == Bad::kUnknown) return std::nullopt;
    bad_field(what, key, "a number", v);
  } else {
    static_assert(std::is_integral_v<T>, "read<T>: an integer, a float, a bool or a string");
    int64_t i;
    if (nb::isinstance<nb::bool_>(v)) return T(nb::cast<bool>(v));
    if (nb::try_cast(v, i)) return T(i);
    double x;
    if (nb::try_cast(v, x) && std::isfinite(x)) return T(int64_t(x));
    if (on_bad == Bad::kUnknown) return std::nullopt;
    bad_field(what, key, "an integer", v);
  }
}

/// d[key] as T (see as()): nullopt when missing or None.
template <typename T>
std::optional<T> read(nanobind::handle d, const char* key, const std::string& what,
                      Bad on_bad = Bad::kRaise) {
  return as<T>(field(d, key), what, key, on_bad);
}

/// read<std::string>(...), "" when unknown.
inline std::string read_str(nanobind::handle d, const char* key, const std::string& what,
                            Bad on_bad = Bad::kRaise) {
  return read<std::string>(d, key, what, on_bad).value_or("");
}

/// d[key] as a list: empty when missing or None; a tuple is read as a list; another type is
/// bad_field() (an empty list under Bad::kUnknown).
nanobind::list read_list(nanobind::handle d, const char* key, const std::string& what,
                         Bad on_bad = Bad::kRaise);

}  // namespace dldoctor::ext
