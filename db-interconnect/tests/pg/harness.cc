#include "harness.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pgt {

namespace {

uint64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const char *what) {
    dprintf(2, "harness: %s: %s\n", what, strerror(errno));
    _exit(126);
}

// In the child after fork: become what c asks, then exec.  Never returns.
[[noreturn]] void become(const Command &c) {
    if (!c.netns.empty()) {
        int fd = open(c.netns.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die(c.netns.c_str());
        close(fd);
    }
    if (c.user) {
        passwd *pw = getpwnam(c.user);
        if (!pw) die(c.user);
        if (setgroups(0, nullptr) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
            die("setuid");
    }
    if (chdir(c.cwd.c_str()) != 0) die(c.cwd.c_str());
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "LANG=C"};
    env.insert(env.end(), c.env.begin(), c.env.end());
    std::vector<char *> argv, envp;
    for (const std::string &a : c.argv) argv.push_back(const_cast<char *>(a.c_str()));
    for (const std::string &e : env) envp.push_back(const_cast<char *>(e.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    execve(argv[0], argv.data(), envp.data());
    die(argv[0]);
}

} // namespace

std::string vipl_pg() {
    return VIPL_PG_TOOL;
}
std::string vipl_run() {
    return VIPL_RUN_TOOL;
}
std::string library() {
    return VIPL_DB_LIBRARY;
}
std::string pg_bin(const char *name) {
    return std::string(VIPL_PG_BINDIR) + "/" + name;
}

Account account(const char *user) {
    passwd *pw = getpwnam(user);
    INFO("user " << user);
    REQUIRE(pw != nullptr);
    return {pw->pw_uid, pw->pw_gid};
}

int spawn(const Command &c, int *to_child, int *from_child) {
    int in[2], out[2];
    REQUIRE(pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    int pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        become(c);
    }
    setpgid(pid, pid);
    close(in[0]);
    close(out[1]);
    *to_child = in[1];
    *from_child = out[0];
    return pid;
}

int reap(int pid, int timeout_ms) {
    uint64_t end = now_ms() + static_cast<uint64_t>(timeout_ms);
    int st = 0;
    for (;;) {
        int r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0) return -1;
        if (now_ms() >= end) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(5000);
    }
}

Result run(const Command &c, int timeout_ms) {
    int to, from;
    int pid = spawn(c, &to, &from);
    close(to);
    Result r;
    uint64_t end = now_ms() + static_cast<uint64_t>(timeout_ms);
    // Until the output ends (every holder of the pipe is gone) or the bound.
    for (;;) {
        uint64_t now = now_ms();
        if (now >= end) break;
        pollfd p{from, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(end - now)) <= 0) continue;
        char buf[4096];
        ssize_t n = read(from, buf, sizeof buf);
        if (n <= 0) break;
        r.out.append(buf, static_cast<size_t>(n));
    }
    close(from);
    r.status = reap(pid, static_cast<int>(end > now_ms() ? end - now_ms() : 0));
    return r;
}

TempDir::TempDir(const char *owner) {
    char tmpl[] = "/tmp/vipl-pg-test.XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
    if (owner) {
        Account a = account(owner);
        REQUIRE(chown(path_.c_str(), a.uid, a.gid) == 0);
    }
}

TempDir::~TempDir() {
    nftw(
        path_.c_str(),
        [](const char *p, const struct stat *, int, FTW *) { return remove(p) == 0 ? 0 : 0; }, 16,
        FTW_DEPTH | FTW_PHYS);
}

int free_port() {
    for (int attempt = 0; attempt < 20; ++attempt) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd >= 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        int port = -1;
        if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
            port = ntohs(a.sin_port);
        close(fd);
        if (port > 0 && port != 5432) return port;
    }
    FAIL("no free port");
    return -1;
}

std::string read_text(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string autogroups_setting() {
    std::string t = read_text("/proc/sys/kernel/sched_autogroup_enabled");
    return t.substr(0, t.find('\n'));
}

void write_text(const std::string &path, const std::string &text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    INFO(path);
    REQUIRE(f.good());
}

std::vector<std::string> lines(const std::string &text) {
    std::vector<std::string> v;
    std::istringstream ss(text);
    for (std::string l; std::getline(ss, l);) v.push_back(l);
    return v;
}

std::vector<std::string> words(const std::string &line) {
    std::vector<std::string> v;
    std::istringstream ss(line);
    for (std::string w; ss >> w;) v.push_back(w);
    return v;
}

std::vector<std::string> vipl_env() {
    return {"VIPL_DB_LOG=1", "VIPL_DB_NEGOTIATE_MS=20000"};
}

} // namespace pgt
