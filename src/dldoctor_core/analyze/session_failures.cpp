// The Session's side of the failure notes: fill in what only the Session knows (a loader's
// batch size) and keep the note.
#include "dldoctor_core/analyze/session.hpp"

namespace dldoctor::analyze {

void Session::note(FailureNote n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* c = std::get_if<CudaMemoryNote>(&n); c && !c->batch_size && c->loader >= 0) {
    if (auto it = loaders_.find(uint16_t(c->loader)); it != loaders_.end())
      c->batch_size = it->second.config().batch_size;
  }
  failures_.note(std::move(n));
}

}  // namespace dldoctor::analyze
