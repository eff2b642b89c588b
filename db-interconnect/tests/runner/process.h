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

class Proc {
public:
    Proc() = default;
    explicit Proc(const Spawn &s);
    ~Proc();
    Proc(Proc &&o) noexcept;
    Proc &operator=(Proc &&o) noexcept;
    Proc(const Proc &) = delete;
    Proc &operator=(const Proc &) = delete;

    int pid() const { return pid_; }
    bool running();

    // Writes all of `data` to stdin (bounded: 10 s); false when the program stopped reading.
    bool write_in(const std::string &data);
    void close_in();

    // Reads stdout until `needle` appeared in it or `ms` passed; whether it appeared.
    bool read_until(const std::string &needle, int ms);
    // read_until, failing the test (with the program's stdout and stderr file) when
    // `needle` does not come.
    void require_output(const std::string &needle, int ms);
    // Everything read from stdout so far (read_until or wait read it).
    const std::string &output() const { return out_; }

    // The exit status: the code, 128 + signal, or -1 when it did not end within ms.
    // Drains a stdout pipe meanwhile.
    int wait(int ms);
    void signal(int sig);
    // Kills the whole group and reaps everything of it (bounded).
    void kill_all();

private:
    void drain(int ms);
    int pid_ = -1;
    int in_fd_ = -1;
    int out_fd_ = -1;
    bool reaped_ = false;
    int status_ = -1;
    std::string out_;
    std::string err_path_;
};

// Runs argv to its end (bounded by ms; killed after) and returns its stdout; *status gets
// the exit status as Proc::wait gives it.
std::string capture(const std::vector<std::string> &argv, int ms, int *status = nullptr);

// Makes the test process a child subreaper (once): the orphans of the programs it starts
// become its children, so that it can reap them and tell whether any survived.
void become_subreaper();

// Kills the process group of every Proc alive and reaps what it can within ~200 ms: for
// a test process that is being terminated (main.cc calls it from its SIGTERM, SIGINT and
// SIGHUP handler).  Async-signal-safe.
void kill_every_group() noexcept;

// Processes whose parent chain leads to pid (not pid itself), from /proc.
std::vector<int> descendants(int pid);

// Whether a process with that pid exists (zombies count as gone).
bool alive(int pid);

} // namespace dbt
