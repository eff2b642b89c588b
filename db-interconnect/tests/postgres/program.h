// A program a PostgreSQL test runs (initdb, pg_ctl, psql, pgbench, openssl...): its own
// process group, a clean environment, optionally under the interposer (vipl-run), as
// another user, in another network namespace, with another descriptor limit, its output
// in a pipe, a file or a pseudo-terminal.  Every wait is bounded; the destructor kills
// the group and reaps the program, so nothing survives a failed test.  The program dies
// with the test process (PR_SET_PDEATHSIG), except what escapes into a session of its
// own (pg_ctl's postmaster: cluster.h stops and reaps those).
//
// Thread rules: a Program belongs to one thread.  Not async-signal-safe.
#pragma once

#include "child_process.h"
#include "clock.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pgt {

// How a program is started.
struct Launch {
    std::vector<std::string> argv; // argv[0]: a path, or a name looked up in kPath
    bool vipl = false;             // through vipl-run (the interposer for it and its children)
    std::string user;              // run as this user and its groups ("" = as the test)
    std::string netns;             // a namespace file (/run/netns/NAME) to enter ("" = ours)
    std::vector<std::string> env;  // NAME=VALUE added to the clean environment
    long nofile = 0;               // RLIMIT_NOFILE, soft and hard (0 = as the test's)
    std::string cwd;               // working directory ("" = /)
    bool in_pipe = false;          // stdin from a pipe (write_in); else /dev/null
    bool out_pipe = false;         // stdout and stderr into one pipe (read_until, output)
    std::string out_file;          // else stdout and stderr appended to this file
    bool tty = false;              // a pseudo-terminal as stdin, stdout and stderr (no
                                   // echo, no output processing): an interactive program
};

// The PATH of every program: PostgreSQL 15's binaries first.
extern const char *const kPath;
// vipl-run of this build.
const std::string &vipl_run_path();

// The pipes, waits and status of the program: support/child_process.h (pid, running,
// write_in, close_in, output, arrival_ns, wait, signal), paced as this suite has always
// paced them.
class Program : public vipl::db::test::ChildProcess {
public:
    Program();
    explicit Program(const Launch &l); // fails the test when the program cannot start
    ~Program();
    Program(Program &&o) noexcept;
    Program &operator=(Program &&o) noexcept;

    // Reads output until `needle` appears after offset `from` of output(), or ms pass.
    // Returns where it starts, or std::string::npos.
    size_t read_until(const std::string &needle, int ms, size_t from = 0) {
        return find_output(needle, ms, from);
    }
    // Kills the whole group with SIGKILL and reaps the program (bounded).
    void kill_all();

private:
    // What is left of its group dies with it; the pid is no longer scratch's to kill.
    void on_exit() override;
    void release();
};

// Runs a program to its end (killed after ms) and returns its output (stdout and stderr);
// *status gets what Program::wait returned (-1: killed at the bound).
std::string run(Launch l, int ms, int *status = nullptr);
// run, failing the test with the command and its output unless it exits with 0.
std::string run_ok(const Launch &l, int ms);

// The command line as text, for messages.
std::string command_text(const Launch &l);

// CLOCK_MONOTONIC in ns; sleeping a number of milliseconds (support/clock.h).
using vipl::db::test::now_ns;
using vipl::db::test::sleep_ms;

// Whether a process is alive, its descendants, the subreaper (support/child_process.h):
// main makes this process the child subreaper once (a postmaster whose pg_ctl exits
// comes back to it) and, after each test, kills and reaps what is left (below).
using vipl::db::test::alive;
using vipl::db::test::become_subreaper;
using vipl::db::test::descendants;
// Waits up to ms for pid to be gone (reaping it if it is our child); whether it went.
bool wait_gone(int pid, int ms);
// Kills every descendant of this process and reaps them all (bounded, ~2 s).
void kill_and_reap_descendants();

} // namespace pgt
