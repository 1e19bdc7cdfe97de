// Whether this process runs in a container, and which kind: fixes are worded for it
// (`docker run --shm-size`, a Kubernetes emptyDir, or a remount on bare metal).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dldoctor::system {

/// In a container or not (empty when nothing could be read), and its kind.
struct ContainerFacts {
  std::optional<bool> in_container;
  std::string kind;  ///< docker, kubernetes, podman, lxc, containerd, "" when none/unknown
};

/// The container kind named by a /proc/1/cgroup text ("kubepods", "docker", "libpod" ...);
/// "" when none is named.
std::string container_kind_from_cgroup(std::string_view text);

/// Looks at `<root>/.dockerenv`, `<root>/run/.containerenv`, `kubernetes_service_host` (the
/// value of KUBERNETES_SERVICE_HOST, null when unset) and `<proc_root>/1/cgroup`.
ContainerFacts detect_container(const std::string& root, const std::string& proc_root,
                                const char* kubernetes_service_host);

}  // namespace dldoctor::system
