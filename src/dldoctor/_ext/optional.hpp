// The one conversion every area's glue needs: an unknown figure (std::nullopt) is None.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>

namespace dldoctor::ext {

/// `v` as a Python object, None when it is unknown.
template <typename T>
nanobind::object opt(const std::optional<T>& v) {
  return v ? nanobind::cast(*v) : nanobind::none();
}

}  // namespace dldoctor::ext
