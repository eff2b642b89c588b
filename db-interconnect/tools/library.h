// Where the interposer library is, for the launchers (vipl-run, vipl-pg).
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <string>

namespace vipl::db::tools {

// The path of libvipl-db.so: $VIPL_RUN_LIBRARY when set, else the first that exists of
// beside this program (the build tree), ../lib beside it (an installed tree), the
// install directory and the build directory this program was built with.  "" when none.
// The path is as found (not made absolute); vipl-pg makes it absolute itself.
std::string library_path();

} // namespace vipl::db::tools
