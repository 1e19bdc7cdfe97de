#include "dldoctor_core/system/container.hpp"

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

std::string container_kind_from_cgroup(std::string_view text) {
  // Most specific first: a Kubernetes pod runs under docker or containerd too.
  if (text.find("kubepods") != std::string_view::npos) return "kubernetes";
  if (text.find("libpod") != std::string_view::npos) return "podman";
  if (text.find("docker") != std::string_view::npos) return "docker";
  if (text.find("containerd") != std::string_view::npos) return "containerd";
  if (text.find("/lxc") != std::string_view::npos) return "lxc";
  return "";
}

ContainerFacts detect_container(const std::string& root, const std::string& proc_root,
                                const char* kubernetes_service_host) {
  ContainerFacts f;
  auto cgroup = read_file(join_path(proc_root, "1/cgroup"));
  std::string from_cgroup = cgroup ? container_kind_from_cgroup(*cgroup) : "";
  if (kubernetes_service_host && *kubernetes_service_host) {
    f.kind = "kubernetes";
  } else if (!from_cgroup.empty() && from_cgroup != "docker") {
    f.kind = from_cgroup;
  } else if (path_exists(join_path(root, ".dockerenv"))) {
    f.kind = "docker";
  } else if (path_exists(join_path(root, "run/.containerenv"))) {
    f.kind = "podman";
  } else {
    f.kind = from_cgroup;
  }
  if (!f.kind.empty()) {
    f.in_container = true;
  } else if (cgroup) {
    // cgroup namespaces hide the markers, so "no marker" is only evidence, not proof.
    f.in_container = false;
  }
  return f;
}

}  // namespace dldoctor::system
