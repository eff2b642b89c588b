// The transcript, checks, results, data and peer processes of harness.h (the family's
// addresses are in family.cc, the server peer's commands in peer.cc).
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace sockdiff {

namespace {

int g_out = 1; // where this process's transcript goes
int g_failures = 0;
std::string g_role = "main";
std::vector<Peer *> g_peers;                       // this process's peers
std::vector<std::pair<pid_t, std::string>> g_pids; // every pid this process knows
int g_spawned = 0;

void write_all(int fd, const std::string &s) {
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = ::write(fd, s.data() + done, s.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

std::string vformat(const char *fmt, va_list ap) {
    char buf[1024];
    va_list aq;
    va_copy(aq, ap);
    int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) n = 0;
    std::string s;
    if (static_cast<size_t>(n) < sizeof buf) {
        s.assign(buf, static_cast<size_t>(n));
    } else {
        s.resize(static_cast<size_t>(n) + 1);
        std::vsnprintf(s.data(), s.size(), fmt, aq);
        s.resize(static_cast<size_t>(n));
    }
    va_end(aq);
    return s;
}

void fail_line(const std::string &what) {
    ++g_failures;
    write_all(g_out, "FAILED: " + what + "\n");
    write_all(2,
              "sockdiff[" + g_role + " " + std::to_string(getpid()) + "]: FAILED: " + what + "\n");
}

} // namespace

// ------------------------------------------------------------------ the transcript

void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    write_all(g_out, s + "\n");
}

void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    write_all(2, "sockdiff[" + g_role + " " + std::to_string(getpid()) + "]: " + s + "\n");
}

bool check(bool ok, const char *fmt, ...) {
    if (ok) return true;
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    fail_line(s);
    return false;
}

void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    fail_line(s);
    kill_peers();
    std::exit(1);
}

int failures() {
    return g_failures;
}

void count_failure() {
    ++g_failures;
}

// ------------------------------------------------------------------ results

Res res(long v) {
    return {v, v < 0 ? errno : 0};
}

const char *errname(int e) {
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

std::string text(Res r) {
    if (r.v >= 0) return std::to_string(r.v);
    return std::to_string(r.v) + " " + errname(r.err);
}

std::string events_text(uint32_t ev) {
    static const struct {
        uint32_t bit;
        const char *name;
    } kBits[] = {{POLLIN, "IN"},   {POLLPRI, "PRI"}, {POLLOUT, "OUT"},  {POLLRDHUP, "RDHUP"},
                 {POLLHUP, "HUP"}, {POLLERR, "ERR"}, {POLLNVAL, "NVAL"}};
    std::string s;
    uint32_t known = 0;
    for (auto &b : kBits) {
        known |= b.bit;
        if (!(ev & b.bit)) continue;
        if (!s.empty()) s += " ";
        s += b.name;
    }
    // The RDNORM/WRNORM family follows IN/OUT on Linux: not shown.
    uint32_t rest =
        ev & ~known & ~static_cast<uint32_t>(POLLRDNORM | POLLRDBAND | POLLWRNORM | POLLWRBAND);
    if (rest) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s0x%x", s.empty() ? "" : " ", rest);
        s += buf;
    }
    return s.empty() ? "-" : s;
}

std::string status_text(int status) {
    if (status < 0) return "not reaped";
    if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const char *n = sigabbrev_np(WTERMSIG(status));
        return std::string("killed by SIG") + (n ? n : "?");
    }
    return "status " + std::to_string(status);
}

// ------------------------------------------------------------------ data

uint8_t pattern_byte(uint64_t off, uint32_t seed) {
    uint64_t x = (off + seed * 0x9e3779b9ull) * 0x2545f4914f6cdd1dull;
    return static_cast<uint8_t>(x >> 56);
}

void fill(uint8_t *p, size_t n, uint64_t off, uint32_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = pattern_byte(off + i, seed);
}

uint32_t crc(const void *p, size_t n, uint32_t h) {
    auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; ++i) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}

uint32_t pattern_crc(size_t n, uint32_t seed) {
    uint32_t h = kCrcStart;
    uint8_t buf[4096];
    for (size_t off = 0; off < n;) {
        size_t k = std::min(sizeof buf, n - off);
        fill(buf, k, off, seed);
        h = crc(buf, k, h);
        off += k;
    }
    return h;
}

short wait_for(int fd, short events, int timeout_ms) {
    uint64_t end = now_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    for (;;) {
        pollfd p{fd, events, 0};
        uint64_t now = now_ns();
        int left = now >= end ? 0 : static_cast<int>((end - now) / 1000000) + 1;
        int r = ::poll(&p, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        return p.revents;
    }
}

size_t send_all(int fd, const void *p, size_t n, Res *last, int timeout_ms) {
    auto *b = static_cast<const uint8_t *>(p);
    size_t done = 0;
    Res r{0, 0};
    while (done < n) {
        r = res(::send(fd, b + done, n - done, MSG_NOSIGNAL));
        if (r.v > 0) {
            done += static_cast<size_t>(r.v);
            continue;
        }
        if (r.v < 0 && r.err == EINTR) continue;
        if (r.v < 0 && r.err == EAGAIN) {
            if (wait_for(fd, POLLOUT, timeout_ms)) continue;
            r = {-1, ETIMEDOUT};
        }
        break;
    }
    if (last) *last = r;
    return done;
}

size_t recv_exact(int fd, void *p, size_t n, Res *last, int timeout_ms) {
    auto *b = static_cast<uint8_t *>(p);
    size_t done = 0;
    Res r{0, 0};
    while (done < n) {
        if (!wait_for(fd, POLLIN, timeout_ms)) {
            r = {-1, ETIMEDOUT};
            break;
        }
        r = res(::recv(fd, b + done, n - done, MSG_DONTWAIT));
        if (r.v > 0) {
            done += static_cast<size_t>(r.v);
            continue;
        }
        if (r.v < 0 && (r.err == EINTR || r.err == EAGAIN)) continue;
        break; // 0: the end of the stream
    }
    if (last) *last = r;
    return done;
}

size_t send_pattern(int fd, size_t n, uint32_t seed, Res *last) {
    std::vector<uint8_t> buf(std::min<size_t>(n, 1 << 20));
    size_t done = 0;
    Res r{0, 0};
    while (done < n) {
        size_t k = std::min(buf.size(), n - done);
        fill(buf.data(), k, done, seed);
        size_t m = send_all(fd, buf.data(), k, &r);
        done += m;
        if (m < k) break;
    }
    if (last) *last = r;
    return done;
}

int readable_bytes(int fd, int want, int timeout_ms) {
    uint64_t end = now_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    int n = 0;
    for (;;) {
        if (ioctl(fd, FIONREAD, &n) != 0) return -1;
        if (n >= want || now_ns() >= end) return n;
        wait_for(fd, POLLIN, 1);
        sleep_ms(1);
    }
}

// ------------------------------------------------------------------ processes

Chan::Chan(Chan &&o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)) {
    o.fd_ = -1;
}

Chan &Chan::operator=(Chan &&o) noexcept {
    if (this != &o) {
        close_now();
        fd_ = o.fd_;
        buf_ = std::move(o.buf_);
        o.fd_ = -1;
    }
    return *this;
}

Chan::~Chan() {
    close_now();
}

void Chan::close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void Chan::tell(const std::string &line) {
    std::string s = line + "\n";
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = ::send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; // the other end is gone: its join says why
        done += static_cast<size_t>(n);
    }
}

bool Chan::hear_maybe(std::string *line, int timeout_ms) {
    uint64_t end = now_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    for (;;) {
        size_t nl = buf_.find('\n');
        if (nl != std::string::npos) {
            *line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return true;
        }
        uint64_t now = now_ns();
        if (now >= end && timeout_ms > 0) return false;
        pollfd p{fd_, POLLIN, 0};
        int left = now >= end ? 0 : static_cast<int>((end - now) / 1000000) + 1;
        int r = ::poll(&p, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        char buf[512];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        buf_.append(buf, static_cast<size_t>(n));
    }
}

std::string Chan::hear(int timeout_ms) {
    std::string line;
    if (!hear_maybe(&line, timeout_ms))
        fatal("no word from the other process within %d ms (or it ended)", timeout_ms);
    return line;
}

std::string Peer::ask(const std::string &cmd, int timeout_ms) {
    chan.tell(cmd);
    std::string line;
    if (!chan.hear_maybe(&line, timeout_ms))
        fatal("%s did not answer \"%s\" within %d ms", role.c_str(), cmd.c_str(), timeout_ms);
    return line;
}

std::string Peer::answer(int timeout_ms) {
    std::string line;
    if (!chan.hear_maybe(&line, timeout_ms))
        fatal("%s gave no answer within %d ms", role.c_str(), timeout_ms);
    return line;
}

const std::string &self_role() {
    return g_role;
}

std::string role_of(pid_t pid) {
    for (auto &[p, r] : g_pids)
        if (p == pid) return r;
    return "another process";
}

void register_main() {
    g_pids.push_back({getpid(), "main"});
}

void become(const std::string &role, int out_fd) {
    g_role = role;
    g_out = out_fd;
    g_failures = 0;
}

Peer *spawn(const std::string &role, const std::function<void(Chan &)> &body) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        fatal("socketpair: %s", strerror(errno));
    auto *p = new Peer;
    p->role = role;
    p->log_path = run().dir + "/" + role + "." + std::to_string(getpid()) + "." +
                  std::to_string(g_spawned++) + ".log";
    int log =
        ::open(p->log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (log < 0) fatal("%s: %s", p->log_path.c_str(), strerror(errno));
    pid_t parent = getpid();
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(96);
        ::close(sv[0]);
        g_out = log;
        g_role = role;
        g_failures = 0;
        g_peers.clear(); // the parent's, not ours to join or kill
        g_pids.push_back({getpid(), role});
        {
            Chan ch(sv[1]);
            body(ch);
        }
        std::exit(g_failures ? 1 : 0);
    }
    ::close(sv[1]);
    ::close(log);
    p->pid = pid;
    p->chan = Chan(sv[0]);
    g_peers.push_back(p);
    g_pids.push_back({pid, role});
    return p;
}

int join(Peer *p, int timeout_ms) {
    if (p->joined) return -1;
    p->joined = true;
    uint64_t end = now_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    int status = -1;
    for (;;) {
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid) break;
        if (r < 0 && errno != EINTR) {
            status = -1;
            break;
        }
        if (now_ns() >= end) {
            check(false, "%s did not end within %d ms: killed", p->role.c_str(), timeout_ms);
            kill(p->pid, SIGKILL);
            while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        sleep_ms(1);
    }
    FILE *f = std::fopen(p->log_path.c_str(), "re");
    if (f) {
        char line[2048];
        while (std::fgets(line, sizeof line, f)) {
            size_t n = std::strlen(line);
            if (n && line[n - 1] == '\n') line[n - 1] = '\0';
            say("%s: %s", p->role.c_str(), line);
            if (std::strncmp(line, "FAILED: ", 8) == 0) ++g_failures;
        }
        std::fclose(f);
    }
    say("%s: %s", p->role.c_str(), status_text(status).c_str());
    p->chan.close_now();
    return status;
}

void join_ok(Peer *p, int timeout_ms) {
    int status = join(p, timeout_ms);
    check(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s ended with %s",
          p->role.c_str(), status_text(status).c_str());
}

void kill_peers() {
    for (Peer *p : g_peers) {
        if (p->joined) continue;
        kill(p->pid, SIGKILL);
        join(p, kWaitMs);
    }
}

} // namespace sockdiff
