// What a PostgreSQL test leaves on the machine, and how it is taken back: temporary
// folders (/tmp/vipl-pg-<pid>-<n>, named after the test process), ports, and the process
// groups and postmasters to kill should the test process itself be ended by a signal.
// A folder whose test process is gone (a run killed outright) is removed by the next
// run, after its postmaster (if any still runs there) is killed.
//
// Thread rules: one thread.  kill_registered() is async-signal-safe; nothing else is.
#pragma once

#include <string>

namespace pgt {

// A fresh folder owned by `owner` (a user name; "" = root), mode 0755, removed with
// everything in it by the destructor.
class Scratch {
public:
    explicit Scratch(const std::string &owner = "postgres");
    ~Scratch();
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;

    const std::string &path() const { return path_; }
    std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// Removes the folders of test processes that are gone (their postmasters killed first).
void remove_stale_scratch();

// A TCP port that nothing on this host listens on now (from a range of our own, never
// 5432), different on each call of this process.
int free_port();

// Files: written whole (owned by `owner` when given, with `mode`), read whole ("" when
// absent), and ownership given to a user.
void write_file(const std::string &path, const std::string &content, const std::string &owner = "",
                int mode = 0644);
std::string read_file(const std::string &path);
void give_to(const std::string &path, const std::string &user);

// Process groups and postmasters that must not outlive the test process: killed with
// SIGKILL by kill_registered() (main's handler of SIGTERM, SIGINT, SIGHUP).
void register_pid(int pid, bool group);
void unregister_pid(int pid);
void kill_registered() noexcept;

} // namespace pgt
