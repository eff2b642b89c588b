// How the program tests run: the paths of what they launch, and whether the programs run
// under the interposer (the default) or plain.
//
// VIPL_DB_TEST_PLAIN=1 runs every program without the interposer: the same byte checks,
// and then no process may keep a connection table (vipl-run --stat shows nothing).  It
// shows that a test's programs and checks work before the interposer is involved.
//
// Thread rules: every function is thread-safe (values fixed at start).
#pragma once

#include <string>
#include <vector>

namespace dbt {

// Whether programs marked "preloaded" run under vipl-run (false in the plain mode).
bool preloaded();

// The launcher, Debian's /usr/bin/python3, and a file of the tests' source folder
// ("programs/echo_server.py").
const std::string &vipl_run();
const std::string &python();
std::string source_file(const std::string &relative);
// The command line that runs one of the tests' Python programs (programs/<name>).
std::vector<std::string> script(const std::string &name);

// The transport a connection that the test expects to ride vipl shows in --stat:
// "shm" under the interposer, "kernel" in the plain mode.
const char *riding();

} // namespace dbt
