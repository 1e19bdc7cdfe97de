// The non-template half of optional.hpp.
#include "optional.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

std::string py_type(nb::handle v) { return nb::cast<std::string>(nb::type_name(v.type())); }

nb::handle field(nb::handle d, const char* key) {
  if (!d.is_valid() || !nb::isinstance<nb::dict>(d)) return nb::handle();
  nb::dict dd = nb::borrow<nb::dict>(d);
  if (!dd.contains(key)) return nb::handle();
  nb::handle v = dd[key];
  return v.is_none() ? nb::handle() : v;
}

void require_dict(nb::handle d, const std::string& what) {
  if (!d.is_valid() || !nb::isinstance<nb::dict>(d))
    throw Error(what + " must be a dict, got " + (d.is_valid() ? py_type(d) : "nothing"));
}

void bad_field(const std::string& what, const char* key, const char* kind, nb::handle v) {
  throw Error(what + " field '" + key + "' must be " + kind + " or None, got " + py_type(v));
}

nb::list read_list(nb::handle d, const char* key, const std::string& what, Bad on_bad) {
  nb::handle v = field(d, key);
  if (!v.is_valid()) return nb::list();
  if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) return nb::list(v);
  if (on_bad == Bad::kUnknown) return nb::list();
  bad_field(what, key, "a list", v);
}

}  // namespace dldoctor::ext
