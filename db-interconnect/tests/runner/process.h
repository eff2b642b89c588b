// A program the test runs: its own process group, its standard streams from files or
// pipes, optionally under the interposer (vipl-run), as another user, with another
// descriptor limit.  Every wait is bounded; the destructor kills the whole group and
// reaps it (the test process is a child subreaper, so the group's orphans come back to
// it), so nothing survives a failed test.  A test process killed outright takes the
// programs with it (each dies with its parent: PR_SET_PDEATHSIG); one terminated by a
// signal kills their groups first (kill_every_group).
//
// Thread rules: a Proc belongs to one thread.  Not async-signal-safe.
#pragma once

#include "child_process.h"

#include <string>
#include <vector>

namespace dbt {

struct Spawn {
    std::vector<std::string> argv;
    bool preload = false;         // through vipl-run (not in the plain mode, see mode.h)
    std::vector<std::string> env; // NAME=VALUE added to the test's environment, from
                                  // which LD_PRELOAD and every VIPL_* are removed first
    std::string in;               // stdin from this file ("" = /dev/null)
    bool in_pipe = false;         // stdin from a pipe: write_in(), close_in()
    std::string out;              // stdout to this file ("" = /dev/null)
    bool out_pipe = false;        // stdout to a pipe: read_until(), output()
    std::string err;              // stderr to this file ("" = the test's own)
    std::string user;             // run as this user and its group ("" = ours)
    long nofile = 0;              // RLIMIT_NOFILE soft and hard before exec (0 = as ours)
    std::string netns;            // run in this network namespace (ip netns name; hosts.h)
};

// What the child of a Proc leaves with when it cannot become the program.
constexpr int kExitRedirect = 120; // stdin/stdout/stderr could not be set up
constexpr int kExitLimit = 121;    // setrlimit(RLIMIT_NOFILE) refused
constexpr int kExitUser = 122;     // the user could not be taken on
constexpr int kExitNetns = 123;    // the network namespace could not be entered
constexpr int kExitExec = 127;     // exec failed

// The pipes, waits and status of the program: support/child_process.h (pid, running,
// write_in, close_in, output, wait, signal), paced as these suites have always paced
// them.
class Proc : public vipl::db::test::ChildProcess {
public:
    Proc();
    explicit Proc(const Spawn &s);
    ~Proc();
    Proc(Proc &&o) noexcept;
    Proc &operator=(Proc &&o) noexcept;

    // Reads stdout until `needle` appeared in it or `ms` passed; whether it appeared.
    bool read_until(const std::string &needle, int ms) {
        return find_output(needle, ms, 0) != std::string::npos;
    }
    // read_until, failing the test (with the program's stdout and stderr file) when
    // `needle` does not come.
    void require_output(const std::string &needle, int ms);
    // Kills the whole group and reaps everything of it (bounded).
    void kill_all();

private:
    std::string err_path_;
};

// Runs argv to its end (bounded by ms; killed after) and returns its stdout; *status gets
// the exit status as Proc::wait gives it.
std::string capture(const std::vector<std::string> &argv, int ms, int *status = nullptr);

// The test process as a child subreaper (the orphans of the programs it starts become
// its children, so that it can reap them and tell whether any survived), the processes
// whose parent chain leads to a pid, and whether a process exists (zombies count as
// gone): support/child_process.h.
using vipl::db::test::alive;
using vipl::db::test::become_subreaper;
using vipl::db::test::descendants;

// Kills the process group of every Proc alive and reaps what it can within ~200 ms: for
// a test process that is being terminated (main.cc calls it from its SIGTERM, SIGINT and
// SIGHUP handler).  Async-signal-safe.
void kill_every_group() noexcept;

} // namespace dbt
