// What a test program's main() returns: the test cases its command line names, run by
// Catch2.  Catch2's own code is compiled once, in catch_impl.cc, for every test program.
#pragma once

namespace vt {

int run_catch(int argc, char **argv);

} // namespace vt
