// What the vipl-pg and extension tests share: running a command (as root, postgres or
// nobody, in a network namespace) with a bounded wait, temporary directories, ports, and
// the paths of the programs under test.
//
// Needs root: servers run as `postgres`, the refusal tests as `nobody`.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pgt {

// The programs of this build and of PostgreSQL 15.
std::string vipl_pg();                // build/db-interconnect/vipl-pg
std::string vipl_run();               // build/db-interconnect/vipl-run
std::string library();                // build/db-interconnect/libvipl-db.so
std::string pg_bin(const char *name); // /usr/lib/postgresql/15/bin/<name>

struct Account {
    uid_t uid = 0;
    gid_t gid = 0;
};
Account account(const char *user); // REQUIREs that it exists

// A command and how to run it.
struct Command {
    std::vector<std::string> argv;
    std::vector<std::string> env; // "NAME=value" beside PATH=/usr/bin:/bin and LANG=C
    const char *user = nullptr;   // run as this user (nullptr: as we are, root)
    std::string netns;            // a network namespace file to enter first ("": ours)
    std::string cwd = "/";
};

struct Result {
    int status = -1; // exit code; -1 when killed at the bound or by a signal
    std::string out; // standard output and error, interleaved
};

// Runs c to its end, at most timeout_ms (then kills its process group).
Result run(const Command &c, int timeout_ms = 60000);

// Starts c with its standard input and output on pipes (*to_child, *from_child, standard
// error with the output); returns its pid, the leader of a process group of its own.
int spawn(const Command &c, int *to_child, int *from_child);

// Waits for pid up to timeout_ms, then kills its process group; its exit code or -1.
int reap(int pid, int timeout_ms);

// A fresh directory under /tmp owned by `owner` (root when nullptr), removed with
// everything in it by the destructor.
class TempDir {
public:
    explicit TempDir(const char *owner = nullptr);
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }

private:
    std::string path_;
};

// A TCP port nothing listens on now (127.0.0.1), never 5432.
int free_port();

std::string read_text(const std::string &path); // "" when unreadable
// The scheduler's autogroups as /proc/sys/kernel/sched_autogroup_enabled says ("1", "0";
// "" when unreadable): what vipl-pg reports.
std::string autogroups_setting();
void write_text(const std::string &path, const std::string &text); // REQUIREs success

// The lines of text, and the whitespace-separated words of a line.
std::vector<std::string> lines(const std::string &text);
std::vector<std::string> words(const std::string &line);

// The environment every interposed process of these tests gets: fallbacks logged, and a
// negotiation step allowed 20 s (the machine is shared: a loaded run must not fall back).
std::vector<std::string> vipl_env();

} // namespace pgt
