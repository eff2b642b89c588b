// The test programs' main, with the case guard (case_guard.h) registered: the
// reference below pulls the guard's object out of the static library.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "case_guard.h"
[[gnu::used]] static const int *const g_guard = &vt::case_guard_registered;
