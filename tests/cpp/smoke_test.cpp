#include <gtest/gtest.h>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/trace/event.hpp"

TEST(Clock, MonotonicAdvances) {
  int64_t a = dldoctor::now_ns();
  int64_t b = dldoctor::now_ns();
  EXPECT_LE(a, b);
}

TEST(Event, OneCacheLine) { EXPECT_EQ(sizeof(dldoctor::trace::Event), 64u); }
