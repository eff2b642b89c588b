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

// This suite's pacing of its programs' pipes (support/child_process.h): a write waiting
// for room reads the output meanwhile; read_until on a closed output waits for the end.
constexpr vipl::db::test::ChildProcess::Pace kPace = {
    .write_poll_ms = 10,
    .read_while_writing = true,
    .read_step_ms = 50,
    .read_until_exit = true,
    .idle_ms = 2,
    .tail_reads = 20,
};

} // namespace

Program::Program() : ChildProcess(kPace) {}

Program::Program(const Launch &l) : ChildProcess(kPace) {
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
    close_in();
    close_out();
    pid_ = -1;
}

Program::Program(Program &&o) noexcept : ChildProcess(kPace) {
    *this = std::move(o);
}

Program &Program::operator=(Program &&o) noexcept {
    if (this != &o) {
        release();
        take(o);
    }
    return *this;
}

void Program::on_exit() {
    kill(-pid_, SIGKILL); // what is left of its group
    unregister_pid(pid_);
}

void Program::kill_all() {
    if (pid_ <= 0 || reaped_) return;
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    uint64_t deadline = now_ns() + 5'000'000'000ull;
    while (!reap_now() && now_ns() < deadline) sleep_ms(1);
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
