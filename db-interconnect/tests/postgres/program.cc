#include "program.h"

#include "scratch.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#ifndef PGT_VIPL_RUN
#define PGT_VIPL_RUN "vipl-run"
#endif

namespace pgt {

const char *const kPath = "/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

const std::string &vipl_run_path() {
    static const std::string p = PGT_VIPL_RUN;
    return p;
}

std::string command_text(const Launch &l) {
    std::string s;
    if (!l.netns.empty()) s += "[netns " + l.netns + "] ";
    if (!l.user.empty()) s += "[as " + l.user + "] ";
    if (l.nofile) s += "[nofile " + std::to_string(l.nofile) + "] ";
    for (const std::string &e : l.env) s += e + " ";
    if (l.vipl) s += "vipl-run ";
    for (size_t i = 0; i < l.argv.size(); ++i) s += (i ? " " : "") + l.argv[i];
    return s;
}

namespace {

struct Account {
    uid_t uid = 0;
    gid_t gid = 0;
    std::string home = "/";
};

Account account_of(const std::string &user) {
    Account a;
    if (user.empty()) return a;
    passwd *pw = getpwnam(user.c_str());
    if (!pw) FAIL("no such user: " << user);
    a.uid = pw->pw_uid;
    a.gid = pw->pw_gid;
    a.home = pw->pw_dir;
    return a;
}

// In the child: a message on stderr, then out.
[[noreturn]] void die(const char *what) {
    char buf[512];
    int n = std::snprintf(buf, sizeof buf, "pg test launch: %s: %s\n", what, std::strerror(errno));
    if (n > 0) (void)!write(2, buf, static_cast<size_t>(n));
    _exit(127);
}

bool reap_now(int pid, int *status) {
    int st = 0;
    int r = waitpid(pid, &st, WNOHANG);
    if (r != pid) return false;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
}

} // namespace

Program::Program(const Launch &l) {
    REQUIRE(!l.argv.empty());
    Account acct = account_of(l.user);
    std::vector<std::string> args;
    if (l.vipl) args.push_back(vipl_run_path());
    args.insert(args.end(), l.argv.begin(), l.argv.end());
    std::vector<std::string> env = {std::string("PATH=") + kPath, "LANG=C.UTF-8", "TZ=UTC",
                                    "HOME=" + acct.home, "PGCONNECT_TIMEOUT=10"};
    if (!l.user.empty()) env.push_back("USER=" + l.user), env.push_back("LOGNAME=" + l.user);
    env.insert(env.end(), l.env.begin(), l.env.end());
    std::vector<char *> argv, envp;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string &e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    int in[2] = {-1, -1}, out[2] = {-1, -1}, master = -1;
    std::string slave;
    if (l.tty) {
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        REQUIRE(master >= 0);
        REQUIRE(grantpt(master) == 0);
        REQUIRE(unlockpt(master) == 0);
        slave = ptsname(master);
        // Set here, before the test writes anything: no echo, raw output.
        termios t;
        REQUIRE(tcgetattr(master, &t) == 0);
        t.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL | ICANON);
        t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
        t.c_cc[VMIN] = 1;
        t.c_cc[VTIME] = 0;
        REQUIRE(tcsetattr(master, TCSANOW, &t) == 0);
    } else {
        if (l.in_pipe) REQUIRE(pipe2(in, O_CLOEXEC) == 0);
        if (l.out_pipe) REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    }
    int netns_fd = -1;
    if (!l.netns.empty()) {
        netns_fd = open(l.netns.c_str(), O_RDONLY | O_CLOEXEC);
        if (netns_fd < 0) FAIL("cannot open the namespace " << l.netns << ": " << strerror(errno));
    }
    int parent = getpid();
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
        if (!l.tty) setpgid(0, 0); // a terminal's program leads a session (below) instead
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        ::signal(SIGPIPE, SIG_DFL);
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGHUP, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) die("setns");
        if (l.tty) {
            if (setsid() < 0) die("setsid");
            int s = open(slave.c_str(), O_RDWR);
            if (s < 0) die("open the terminal");
            ioctl(s, TIOCSCTTY, 0);
            dup2(s, 0), dup2(s, 1), dup2(s, 2);
            if (s > 2) close(s);
        } else {
            int nul = open("/dev/null", O_RDWR);
            dup2(l.in_pipe ? in[0] : nul, 0);
            if (l.out_pipe) {
                dup2(out[1], 1), dup2(out[1], 2);
            } else if (!l.out_file.empty()) {
                int f = open(l.out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (f < 0) die("open the output file");
                dup2(f, 1), dup2(f, 2);
            } else {
                dup2(nul, 1);
            }
        }
        // Nothing of the test's (ctest's pipes among them) reaches the program: a program
        // run with a small descriptor limit has exactly the descriptors it opens.
        close_range(3, ~0u, 0);
        if (l.nofile) {
            rlimit r{static_cast<rlim_t>(l.nofile), static_cast<rlim_t>(l.nofile)};
            if (setrlimit(RLIMIT_NOFILE, &r) != 0) die("setrlimit");
        }
        if (!l.user.empty()) {
            if (initgroups(l.user.c_str(), acct.gid) != 0) die("initgroups");
            if (setgid(acct.gid) != 0) die("setgid");
            if (setuid(acct.uid) != 0) die("setuid");
        }
        if (chdir(l.cwd.empty() ? "/" : l.cwd.c_str()) != 0) die("chdir");
        environ = envp.data();
        execvp(argv[0], argv.data());
        die(argv[0]);
    }
    if (!l.tty) setpgid(pid_, pid_);
    register_pid(pid_, true);
    if (netns_fd >= 0) close(netns_fd);
    if (l.tty) {
        out_fd_ = master;
        in_fd_ = dup(master);
    } else {
        if (l.in_pipe) close(in[0]), in_fd_ = in[1];
        if (l.out_pipe) close(out[1]), out_fd_ = out[0];
    }
    if (in_fd_ >= 0) fcntl(in_fd_, F_SETFL, fcntl(in_fd_, F_GETFL) | O_NONBLOCK);
    if (out_fd_ >= 0) fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
}

Program::~Program() {
    release();
}

void Program::release() {
    if (pid_ > 0 && !reaped_) kill_all();
    if (in_fd_ >= 0) close(in_fd_);
    if (out_fd_ >= 0) close(out_fd_);
    in_fd_ = out_fd_ = -1;
    pid_ = -1;
}

Program::Program(Program &&o) noexcept {
    *this = std::move(o);
}

Program &Program::operator=(Program &&o) noexcept {
    if (this != &o) {
        release();
        pid_ = o.pid_, in_fd_ = o.in_fd_, out_fd_ = o.out_fd_, reaped_ = o.reaped_;
        status_ = o.status_, out_ = std::move(o.out_), arrivals_ = std::move(o.arrivals_);
        o.pid_ = o.in_fd_ = o.out_fd_ = -1;
        o.reaped_ = true;
    }
    return *this;
}

bool Program::running() {
    if (reaped_ || pid_ <= 0) return false;
    if (reap_now(pid_, &status_)) {
        reaped_ = true;
        kill(-pid_, SIGKILL); // what is left of its group
        unregister_pid(pid_);
    }
    return !reaped_;
}

bool Program::write_in(const std::string &data) {
    if (in_fd_ < 0) return false;
    size_t done = 0;
    uint64_t deadline = now_ns() + 10'000'000'000ull;
    while (done < data.size()) {
        ssize_t n = write(in_fd_, data.data() + done, data.size() - done);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
        if (now_ns() > deadline) return false;
        pollfd p{in_fd_, POLLOUT, 0};
        poll(&p, 1, 10);
        pump(0); // a program blocked on its output stops reading its input
    }
    return true;
}

void Program::close_in() {
    if (in_fd_ >= 0 && in_fd_ != out_fd_) close(in_fd_);
    in_fd_ = -1;
}

void Program::pump(int ms) {
    if (out_fd_ < 0) {
        if (ms > 0) sleep_ms(ms);
        return;
    }
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return;
    char buf[65536];
    for (int i = 0; i < 64; ++i) {
        ssize_t n = read(out_fd_, buf, sizeof buf);
        if (n > 0) {
            out_.append(buf, static_cast<size_t>(n));
            arrivals_.emplace_back(out_.size(), now_ns());
            continue;
        }
        if (n == 0 || (n < 0 && errno == EIO)) { // the end (a terminal gives EIO)
            close(out_fd_);
            if (in_fd_ == out_fd_) in_fd_ = -1;
            out_fd_ = -1;
        }
        return;
    }
}

size_t Program::read_until(const std::string &needle, int ms, size_t from) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    for (;;) {
        size_t at = out_.find(needle, from);
        if (at != std::string::npos) return at;
        uint64_t now = now_ns();
        if (now >= deadline || (out_fd_ < 0 && !running())) return std::string::npos;
        pump(static_cast<int>(std::min<uint64_t>((deadline - now) / 1000000 + 1, 50)));
    }
}

uint64_t Program::arrival_ns(size_t offset) const {
    for (const auto &[size, t] : arrivals_)
        if (size > offset) return t;
    return 0;
}

int Program::wait(int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    while (running()) {
        if (now_ns() >= deadline) return -1;
        pump(out_fd_ >= 0 ? 5 : 2);
    }
    // What it wrote last (a child of its group may hold the pipe: bounded).
    for (int i = 0; i < 20 && out_fd_ >= 0; ++i) pump(5);
    return status_;
}

void Program::signal(int sig) {
    if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

void Program::kill_all() {
    if (pid_ <= 0 || reaped_) return;
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    uint64_t deadline = now_ns() + 5'000'000'000ull;
    while (!reap_now(pid_, &status_) && now_ns() < deadline) sleep_ms(1);
    reaped_ = true;
    unregister_pid(pid_);
}

std::string run(Launch l, int ms, int *status) {
    l.out_pipe = true;
    Program p(l);
    int st = p.wait(ms);
    if (st < 0) p.kill_all();
    if (status) *status = st;
    return p.output();
}

std::string run_ok(const Launch &l, int ms) {
    int st = 0;
    std::string out = run(l, ms, &st);
    INFO("$ " << command_text(l) << "\n" << out);
    REQUIRE(st == 0);
    return out;
}

bool alive(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    if (!std::getline(f, s)) return false;
    size_t p = s.rfind(')');
    return p != std::string::npos && p + 2 < s.size() && s[p + 2] != 'Z' && s[p + 2] != 'X';
}

bool wait_gone(int pid, int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    for (;;) {
        int st;
        waitpid(pid, &st, WNOHANG);
        if (!alive(pid)) {
            waitpid(pid, &st, WNOHANG);
            return true;
        }
        if (now_ns() >= deadline) return false;
        sleep_ms(1);
    }
}

std::vector<int> descendants(int pid) {
    std::multimap<int, int> children; // ppid -> pid
    if (DIR *d = opendir("/proc")) {
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
            std::string s;
            if (!std::getline(f, s)) continue;
            size_t p = s.rfind(')');
            if (p == std::string::npos) continue;
            std::istringstream rest(s.substr(p + 2));
            char state;
            int ppid;
            if (rest >> state >> ppid) children.emplace(ppid, std::atoi(e->d_name));
        }
        closedir(d);
    }
    std::vector<int> out, todo{pid};
    while (!todo.empty() && out.size() < 100000) {
        int p = todo.back();
        todo.pop_back();
        auto [a, b] = children.equal_range(p);
        for (auto it = a; it != b; ++it) out.push_back(it->second), todo.push_back(it->second);
    }
    return out;
}

void become_subreaper() {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

void kill_and_reap_descendants() {
    uint64_t deadline = now_ns() + 2'000'000'000ull;
    for (;;) {
        for (int p : descendants(getpid())) kill(p, SIGKILL);
        int st;
        while (waitpid(-1, &st, WNOHANG) > 0) {
        }
        if (descendants(getpid()).empty() || now_ns() > deadline) return;
        sleep_ms(2);
    }
}

} // namespace pgt
