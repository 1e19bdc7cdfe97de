// Anchors the core library; the clock is header-only.
#include "dldoctor_core/common/clock.hpp"
