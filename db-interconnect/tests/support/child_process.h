// What the db test harnesses' process launchers share (the PostgreSQL suite's
// pgt::Program, postgres/program.h; the programs and faults suites' dbt::Proc,
// runner/process.h): the state of a started child (its pid, the test's end of its stdin
// and stdout, its exit status, the output read so far), the bounded reading and writing
// of those pipes, reaping, and the /proc process tree.  Each harness forks and execs in
// its own way and kills its program in its own way; both decide here how a child's
// pipes are pumped and its status read, so the two cannot drift apart.
//
// Thread rules: a ChildProcess belongs to one thread.  Not async-signal-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vipl::db::test {

// The exit status as the harnesses report it: the code, 128 + the signal, or -1 for a
// waitpid status that is neither (not one of an ended process).
int exit_code(int wait_status);

// Whether process pid exists and has not ended (a zombie, or one being torn down, is gone).
bool alive(int pid);

// The processes whose parent chain leads to pid (not pid itself), from /proc, nearest
// first.
std::vector<int> descendants(int pid);

// Makes this process the child subreaper of what it starts: the orphans of its programs
// come back to it, so that it can reap them and tell whether any survived.
void become_subreaper();

// A started child program as the test sees it.  The launcher (the derived class) forks,
// sets pid_, in_fd_ (stdin's write end) and out_fd_ (stdout's read end; a terminal's
// master may be both), non-blocking, and kills its program in its own way (kill_all);
// everything between is here.
class ChildProcess {
public:
    // Where the two harnesses' pacing differs (each keeps its own).
    struct Pace {
        int write_poll_ms;       // a write_in waiting for room polls stdin this long...
        bool read_while_writing; // ...and then reads stdout (a program blocked on its
                                 // output stops reading its input)
        int read_step_ms;        // read_until waits at most this long per read
        bool read_until_exit;    // read_until with stdout closed goes on until the end
        int idle_ms;             // wait without a stdout pipe sleeps this long per check
        int tail_reads;          // after the end, wait reads stdout at most this many
                                 // times (-1: until it closes or wait's bound passes)
    };

    int pid() const { return pid_; }
    // Whether it has not ended yet (reaps it when it has; on_exit then runs).
    bool running();

    // Writes all of data to stdin (pipe or terminal), bounded by 10 s; false when the
    // program stopped reading.
    bool write_in(const std::string &data);
    void close_in();

    // Everything read from stdout so far (read_until and wait read it).
    const std::string &output() const { return out_; }
    // Monotonic time (ns) at which the output first reached `offset` bytes (0: not yet):
    // when a line arrived, for tests that bound how fast a program heard of something.
    uint64_t arrival_ns(size_t offset) const;

    // The exit status (exit_code), or -1 when it did not end within ms (it is left
    // running).  Reads stdout meanwhile, and after the end what is left of it.
    int wait(int ms);
    // Sends sig to the program itself (not its group) while it has not been reaped.
    void signal(int sig);

protected:
    explicit ChildProcess(Pace pace) : pace_(pace) {}
    // Closes what is left of the pipes; killing the program is the launcher's.
    ~ChildProcess();
    ChildProcess(const ChildProcess &) = delete;
    ChildProcess &operator=(const ChildProcess &) = delete;

    // Runs once when running() reaps the program.
    virtual void on_exit() {}

    // Takes o's program and pipes (this one must hold none); o is left empty.
    void take(ChildProcess &o) noexcept;
    // waitpid without blocking; on the end sets reaped_ and status_ (no on_exit).
    bool reap_now();
    // Reads what stdout has within ms (sleeps ms without a stdout pipe); closes it at its end.
    void pump(int ms);
    // Reads stdout until needle appears after offset `from`, or ms pass; where it starts,
    // or std::string::npos.
    size_t find_output(const std::string &needle, int ms, size_t from);
    void close_out();

    int pid_ = -1;
    int in_fd_ = -1;
    int out_fd_ = -1;
    bool reaped_ = false;
    int status_ = -1;
    std::string out_;

private:
    Pace pace_;
    std::vector<std::pair<size_t, uint64_t>> arrivals_; // (output size after a read, time)
};

} // namespace vipl::db::test
