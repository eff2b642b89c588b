// The test programs' main, with the case guard (case_guard.h) registered: the
// reference below pulls the guard's object out of the static library.
#include "case_guard.h"
#include "catch_run.h"

[[gnu::used]] static const int *const g_guard = &vt::case_guard_registered;

int main(int argc, char **argv) {
    return vt::run_catch(argc, argv);
}
