// Events between Python and the ring: this process's writer (trace_emit for rare events from
// Python, the batch hooks for every batch from C++ without a Python frame) and the one tuple
// shape events have in Python (EventRing.drain, Monitor.trace_events).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::ext {

/// An Event from the hooks' values. Python ints arrive as int64 and are narrowed here,
/// never rejected: a hook must not raise because a value was out of a field's range.
/// t_ns = 0: now.
trace::Event make_event(int64_t kind, int64_t loader, int64_t worker, int64_t index, int64_t count,
                        int64_t t_ns, int64_t v0, int64_t v1, int64_t v2, int64_t v3, int64_t flags,
                        int64_t weight, uint32_t pid) noexcept;

/// True while this process has a ring open (trace_open).
bool writer_active() noexcept;
/// Appends one event through this process's ring, stamped with this process's pid. False
/// when no ring is open or it is full; never blocks, never raises. Needs the GIL.
bool writer_emit(int64_t kind, int64_t loader, int64_t worker, int64_t index, int64_t count,
                 int64_t t_ns, int64_t v0 = 0, int64_t v1 = 0, int64_t v2 = 0, int64_t v3 = 0,
                 int64_t flags = 0, int64_t weight = 0) noexcept;

/// Notes through this process's ring that `loader`, in `epoch`, next hands out batch
/// `next_index` (EventRing::note_progress); nothing when no ring is open. Needs the GIL.
void writer_progress(int loader, long long epoch, long long next_index) noexcept;

/// Whether this process may profile a fetch of `loader` now, by the loader's schedule in the
/// ring (EventRing::claim_profile); false when no ring is open. Needs the GIL.
bool writer_claim_profile(int loader, int64_t first_spacing_ns, int64_t max_spacing_ns) noexcept;

/// The names of an event tuple's fields, in order (the vocabulary's "event_fields").
inline constexpr const char* kEventFields[] = {"kind",   "pid",   "t_ns",  "flags", "loader",
                                               "worker", "index", "count", "v0",    "v1",
                                               "v2",     "v3",    "weight"};
/// An event as Python sees it: a tuple of kEventFields.
nanobind::tuple event_to_tuple(const trace::Event& e);

}  // namespace dldoctor::ext
