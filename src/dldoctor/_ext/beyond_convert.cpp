// Dicts from the side log to analyzer notes; see beyond_convert.hpp.
#include "beyond_convert.hpp"

#include <nanobind/stl/string.h>

#include <cmath>
#include <optional>
#include <string>

namespace nb = nanobind;

namespace dldoctor::ext {
namespace {

nb::object get(nb::handle d, const char* key) {
  if (!d.is_valid() || !nb::isinstance<nb::dict>(d)) return nb::none();
  nb::dict dd = nb::borrow<nb::dict>(d);
  if (!dd.contains(key)) return nb::none();
  return dd[key];
}

std::optional<int64_t> as_int(nb::handle v) {
  if (!v.is_valid() || v.is_none() || nb::isinstance<nb::bool_>(v)) return std::nullopt;
  int64_t x;
  if (nb::try_cast(v, x)) return x;
  double f;
  if (nb::try_cast(v, f) && std::isfinite(f)) return int64_t(f);
  return std::nullopt;
}

std::optional<double> as_double(nb::handle v) {
  if (!v.is_valid() || v.is_none()) return std::nullopt;
  double f;
  if (nb::try_cast(v, f) && std::isfinite(f)) return f;
  return std::nullopt;
}

std::string as_str(nb::handle v) {
  if (!v.is_valid() || v.is_none()) return {};
  std::string s;
  if (nb::try_cast(v, s)) return s;
  return {};
}

bool as_bool(nb::handle v, bool dflt) {
  if (!v.is_valid() || v.is_none()) return dflt;
  bool b;
  if (nb::try_cast(v, b)) return b;
  return dflt;
}

}  // namespace

analyze::DatasetNotes dataset_notes_from_dict(nb::handle d) {
  analyze::DatasetNotes n;
  n.type = as_str(get(d, "dataset_type"));
  n.length = as_int(get(d, "length"));
  n.pickled_bytes = as_int(get(d, "pickled_bytes"));
  n.pickle_ms = as_double(get(d, "pickle_ms"));
  n.pickle_complete = as_bool(get(d, "pickle_complete"), true);
  n.shared_tensor_bytes = as_int(get(d, "shared_tensor_bytes"));
  nb::object attrs = get(d, "attrs");
  if (nb::isinstance<nb::list>(attrs)) {
    for (nb::handle a : nb::borrow<nb::list>(attrs)) {
      if (!nb::isinstance<nb::dict>(a)) continue;
      analyze::DatasetAttr x;
      x.name = as_str(get(a, "name"));
      x.type = as_str(get(a, "type"));
      x.elements = as_int(get(a, "elements"));
      x.bytes = as_int(get(a, "bytes"));
      x.element_type = as_str(get(a, "element_type"));
      x.python_objects = as_bool(get(a, "python_objects"), false);
      if (!x.name.empty() && n.attrs.size() < 64) n.attrs.push_back(std::move(x));
    }
  }
  return n;
}

analyze::SlowBatchNote slow_batch_from_dict(nb::handle d) {
  analyze::SlowBatchNote n;
  n.pid = int(as_int(get(d, "pid")).value_or(0));
  n.worker = int(as_int(get(d, "worker")).value_or(-1));
  n.index = int(as_int(get(d, "index")).value_or(-1));
  n.fetch_ns = as_int(get(d, "fetch_ns")).value_or(0);
  nb::object samples = get(d, "samples");
  if (nb::isinstance<nb::list>(samples))
    for (nb::handle s : nb::borrow<nb::list>(samples))
      if (auto i = as_int(s); i && n.samples.size() < 64) n.samples.push_back(*i);
  return n;
}

}  // namespace dldoctor::ext
