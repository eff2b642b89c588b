#include "process.h"

#include "mode.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

extern char **environ;

namespace dbt {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point after(int ms) {
    return Clock::now() + std::chrono::milliseconds(ms);
}

// These suites' pacing of their programs' pipes (support/child_process.h): read_until
// stops as soon as stdout closed; wait reads stdout to its end within its own bound.
constexpr vipl::db::test::ChildProcess::Pace kPace = {
    .write_poll_ms = 100,
    .read_while_writing = false,
    .read_step_ms = 20,
    .read_until_exit = false,
    .idle_ms = 5,
    .tail_reads = -1,
};

// The environment of a program: ours without the interposer's variables, plus extra.
std::vector<std::string> program_env(const std::vector<std::string> &extra) {
    std::vector<std::string> env;
    for (char **e = environ; e && *e; ++e) {
        if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 || std::strncmp(*e, "VIPL_", 5) == 0) continue;
        env.emplace_back(*e);
    }
    for (const std::string &kv : extra) env.push_back(kv);
    return env;
}

std::vector<char *> pointers(std::vector<std::string> &v) {
    std::vector<char *> p;
    for (std::string &s : v) p.push_back(s.data());
    p.push_back(nullptr);
    return p;
}

int open_or_fail(const std::string &path, int flags) {
    int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) FAIL("open " << path << ": " << std::strerror(errno));
    return fd;
}

// The groups of the live Procs, for kill_every_group (slots of 0 are free).
constexpr int kGroups = 256;
std::atomic<int> g_groups[kGroups];

void remember_group(int pgid) {
    for (auto &g : g_groups) {
        int free = 0;
        if (g.compare_exchange_strong(free, pgid)) return;
    }
}

void forget_group(int pgid) {
    for (auto &g : g_groups) {
        int mine = pgid;
        if (g.compare_exchange_strong(mine, 0)) return;
    }
}

} // namespace

void kill_every_group() noexcept {
    for (auto &g : g_groups)
        if (int pgid = g.load(); pgid > 0) ::kill(-pgid, SIGKILL);
    for (int i = 0; i < 100; ++i) {
        while (waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        timespec ts{0, 2000000};
        nanosleep(&ts, nullptr);
    }
}

Proc::Proc() : ChildProcess(kPace) {}

Proc::Proc(const Spawn &s) : ChildProcess(kPace) {
    REQUIRE(!s.argv.empty());
    std::vector<std::string> argv;
    if (s.preload && preloaded()) {
        argv.push_back(vipl_run());
        argv.push_back("--");
    }
    argv.insert(argv.end(), s.argv.begin(), s.argv.end());
    std::vector<std::string> env = program_env(s.env);
    std::vector<char *> av = pointers(argv), ev = pointers(env);

    uid_t uid = 0;
    gid_t gid = 0;
    if (!s.user.empty()) {
        passwd *pw = getpwnam(s.user.c_str());
        INFO("user " << s.user);
        REQUIRE(pw);
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    int in = s.in_pipe ? -1 : open_or_fail(s.in.empty() ? "/dev/null" : s.in, O_RDONLY);
    int out = s.out_pipe
                  ? -1
                  : open_or_fail(s.out.empty() ? "/dev/null" : s.out, O_WRONLY | O_CREAT | O_TRUNC);
    int err = s.err.empty() ? -1 : open_or_fail(s.err, O_WRONLY | O_CREAT | O_TRUNC);
    int ns = s.netns.empty() ? -1 : open_or_fail("/run/netns/" + s.netns, O_RDONLY);
    int inp[2] = {-1, -1}, outp[2] = {-1, -1};
    if (s.in_pipe) {
        REQUIRE(pipe2(inp, O_CLOEXEC) == 0);
        in = inp[0];
        in_fd_ = inp[1];
        // Every write is bounded (write_in): never one that blocks until all is taken.
        fcntl(in_fd_, F_SETFL, O_NONBLOCK);
    }
    if (s.out_pipe) {
        REQUIRE(pipe2(outp, O_CLOEXEC) == 0);
        out = outp[1];
        out_fd_ = outp[0];
        fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    }

    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
        // Only async-signal-safe calls from here (the test process may have threads).
        setpgid(0, 0);
        ::signal(SIGPIPE, SIG_DFL);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || (err >= 0 && dup2(err, 2) < 0))
            _exit(kExitRedirect);
        syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
        if (ns >= 0 && setns(ns, CLONE_NEWNET) != 0) _exit(kExitNetns);
        if (s.nofile > 0) {
            rlimit rl{static_cast<rlim_t>(s.nofile), static_cast<rlim_t>(s.nofile)};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(kExitLimit);
        }
        if (!s.user.empty() && (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 ||
                                setresuid(uid, uid, uid) != 0))
            _exit(kExitUser);
        // After the change of user, which clears it.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execvpe(av[0], av.data(), ev.data());
        _exit(kExitExec);
    }
    setpgid(pid_, pid_);
    remember_group(pid_);
    err_path_ = s.err;
    close(in);
    close(out);
    if (err >= 0) close(err);
    if (ns >= 0) close(ns);
}

Proc::~Proc() {
    kill_all();
}

Proc::Proc(Proc &&o) noexcept : ChildProcess(kPace), err_path_(std::move(o.err_path_)) {
    take(o);
}

Proc &Proc::operator=(Proc &&o) noexcept {
    if (this != &o) {
        kill_all();
        take(o);
        err_path_ = std::move(o.err_path_);
    }
    return *this;
}

void Proc::require_output(const std::string &needle, int ms) {
    if (read_until(needle, ms)) return;
    std::ifstream f(err_path_);
    std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (err.size() > 4000) err = err.substr(0, 4000) + "...";
    FAIL("no \"" << needle << "\" from pid " << pid_ << " within " << ms << " ms; stdout:\n"
                 << out_ << "\nstderr" << (err_path_.empty() ? "" : " (" + err_path_ + ")") << ":\n"
                 << err);
}

void Proc::kill_all() {
    if (pid_ < 0) return;
    close_in();
    ::kill(-pid_, SIGKILL);
    if (!reaped_) ::kill(pid_, SIGKILL);
    auto dl = after(5000);
    while (running() && Clock::now() < dl)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // Orphans of the group (reparented to us, the subreaper) go the same way.
    while (Clock::now() < dl) {
        int st;
        pid_t r = waitpid(-pid_, &st, WNOHANG);
        if (r > 0) continue;
        if (r < 0 && errno == ECHILD && ::kill(-pid_, 0) != 0) break;
        ::kill(-pid_, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    close_out();
    forget_group(pid_);
    pid_ = -1;
}

std::string capture(const std::vector<std::string> &argv, int ms, int *status) {
    Spawn s;
    s.argv = argv;
    s.out_pipe = true;
    Proc p(s);
    int st = p.wait(ms);
    if (status) *status = st;
    return p.output();
}

} // namespace dbt
