// sockdiff compare (compare.cc) and the scenarios' table (main.cc).
#pragma once

#include "harness.h"

#include <string>

namespace sockdiff {

// Runs `exe run scenario family` plain and preloaded with `preload` (--expect-vipl) and
// prints whether the transcripts agree (a line-by-line difference when they do not, and
// the runs' standard error when one failed).  0 when they agree and both runs passed.
int compare_main(const std::string &exe, const std::string &scenario, Family family,
                 const std::string &preload, bool verbose);

// One scenario: its name on the command line, what it covers, its body (run in the main
// process; it spawns and joins its peers).
struct Scenario {
    const char *name;
    const char *what;
    void (*body)();
};

// The scenario files' bodies.
void echo_scenario();
void nonblock_scenario();
void fork_accept_scenario();
void dup_scenario();
void exec_scenario();
void epoll_scenario();
void poll_scenario();
void signals_scenario();
void half_close_scenario();
void peer_death_scenario();
void names_scenario();
void fd_exhaustion_scenario();
void high_fd_scenario();

// The new image of the exec scenario (sockdiff exec-image ...).
int exec_image_main(int argc, char **argv);

} // namespace sockdiff
