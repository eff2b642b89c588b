#include "netns.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace vt {
namespace {

constexpr const char *kPrefix = "vipl-tf";
constexpr const char *kNetnsDir = "/run/netns";

// The program to exec for name: a path as given, else the first executable
// of that name in PATH or the sbin directories (root's tools may live there
// while PATH lacks them).
std::string find_program(const std::string &name) {
    if (name.find('/') != std::string::npos) return name;
    std::string dirs = getenv("PATH") ? getenv("PATH") : "";
    dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
    size_t p = 0;
    while (p <= dirs.size()) {
        size_t q = dirs.find(':', p);
        if (q == std::string::npos) q = dirs.size();
        if (q > p) {
            std::string path = dirs.substr(p, q - p) + "/" + name;
            if (access(path.c_str(), X_OK) == 0) return path;
        }
        p = q + 1;
    }
    return "";
}

int64_t left_ms(uint64_t deadline) {
    uint64_t now = mono_ns();
    return now >= deadline ? 0 : static_cast<int64_t>((deadline - now) / 1000000 + 1);
}

// Is pid a live process?  A zombie is not (a container's first process
// may never reap the orphans of a killed run).
bool alive(long pid) {
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *f = fopen(path.c_str(), "re");
    if (!f) return false;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); // the name may contain anything
    if (!paren || paren[1] != ' ') return true;
    return paren[2] != 'Z' && paren[2] != 'X';
}

} // namespace

uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int run_command(const std::vector<std::string> &argv, std::string *output, int timeout_ms) {
    std::string prog = find_program(argv.at(0));
    if (prog.empty()) {
        if (output) *output = argv[0] + ": not found";
        return -1;
    }
    std::vector<std::string> args = argv;
    std::vector<char *> cargv;
    for (std::string &a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return -1;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]);
        close(out[1]);
        if (devnull >= 0) close(devnull);
        return -1;
    }
    if (pid == 0) {
        if (devnull >= 0) dup2(devnull, 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        execv(prog.c_str(), cargv.data());
        _exit(127);
    }
    close(out[1]);
    if (devnull >= 0) close(devnull);
    uint64_t deadline = mono_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    std::string text;
    for (;;) {
        pollfd p{out[0], POLLIN, 0};
        int r = poll(&p, 1, static_cast<int>(left_ms(deadline)));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; // the bound: reap kills it
        char buf[512];
        ssize_t n = read(out[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<size_t>(n));
    }
    close(out[0]);
    int status = reap(pid, deadline);
    if (output) *output = text;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int reap(int pid, uint64_t deadline) {
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (r < 0 && errno != EINTR) return -1;
        if (mono_ns() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return -1;
        }
        timespec ms{0, 1000000};
        nanosleep(&ms, nullptr);
    }
}

std::string netns_unavailable() {
    if (geteuid() != 0) return "not root";
    std::string out;
    if (run_command({"ip", "-V"}, &out) != 0) return "no usable `ip` (iproute2): " + out;
    return "";
}

// ------------------------------------------------------------- NetnsPair

NetnsPair::NetnsPair(std::string *error) {
    if (!make(error)) remove();
}

std::string NetnsPair::path(int side) const {
    return std::string(kNetnsDir) + "/" + ns_[side];
}

bool NetnsPair::make(std::string *error) {
    static std::atomic<int> count{0};
    int n = count++;
    long pid = getpid();
    std::string base = kPrefix + std::to_string(pid) + "-" + std::to_string(n);
    // 10.A.B.0/24 from the pid and the pair's number: any /24 would do (the
    // addresses exist inside the namespaces only), this one just varies.
    unsigned a = 64 + static_cast<unsigned>((pid >> 8) % 128);
    unsigned b = static_cast<unsigned>((pid + n * 37) % 256);
    char text[32];
    for (int s = 0; s < 2; ++s) {
        ns_[s] = base + (s ? "b" : "a");
        snprintf(text, sizeof text, "10.%u.%u.%d", a, b, s + 1);
        addr_[s] = text;
        snprintf(text, sizeof text, "02:76:74:%02x:%02x:%02x", a, b, s + 1);
        mac_[s] = text;
    }
    ns_[kSwitch] = base + "m";
    remove_stale();
    for (int i = 0; i < 3; ++i) {
        std::string out;
        if (run_command({"ip", "netns", "add", ns_[i]}, &out) != 0) {
            *error = "ip netns add " + ns_[i] + ": " + out;
            return false;
        }
        made_[i] = true;
    }
    if (!ip(kSwitch, {"link", "add", "br0", "type", "bridge"}, error)) return false;
    for (int s = 0; s < 2; ++s) {
        std::string vf = "vf" + std::to_string(s), port = "port" + std::to_string(s);
        // Both ends are born inside their namespaces.
        if (!ip(s,
                {"link", "add", vf, "address", mac_[s], "type", "veth", "peer", "name", port,
                 "netns", ns_[kSwitch]},
                error) ||
            !ip(kSwitch, {"link", "set", "dev", port, "master", "br0", "up"}, error) ||
            !ip(s, {"addr", "add", addr_[s] + "/24", "dev", vf}, error) ||
            !ip(s, {"link", "set", "dev", "lo", "up"}, error) ||
            !ip(s, {"link", "set", "dev", vf, "up"}, error) ||
            !ip(s,
                {"neigh", "replace", addr_[1 - s], "lladdr", mac_[1 - s], "dev", vf, "nud",
                 "permanent"},
                error))
            return false;
    }
    if (!ip(kSwitch, {"link", "set", "dev", "br0", "up"}, error)) return false;
    ok_ = true;
    return true;
}

NetnsPair::~NetnsPair() {
    remove();
}

bool NetnsPair::ip(int ns, const std::vector<std::string> &args, std::string *error) {
    std::vector<std::string> argv = {"ip", "-n", ns_[ns]};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (run_command(argv, &out) == 0) return true;
    std::string cmd;
    for (auto &a : argv) cmd += a + " ";
    *error = cmd + "failed: " + out;
    return false;
}

bool NetnsPair::set_link(bool up, std::string *error) {
    // A bridge that is down forwards nothing (its ports are disabled); with
    // spanning tree off (the default) they forward again as soon as it is up.
    return ip(kSwitch, {"link", "set", "dev", "br0", up ? "up" : "down"}, error);
}

void NetnsPair::remove() {
    ok_ = false;
    for (int i = 0; i < 3; ++i)
        if (made_[i]) {
            // A namespace that processes still use lives on until they end;
            // its name goes now.
            run_command({"ip", "netns", "del", ns_[i]});
            made_[i] = false;
        }
}

void NetnsPair::remove_stale() {
    DIR *d = opendir(kNetnsDir);
    if (!d) return;
    std::vector<std::string> stale;
    size_t plen = strlen(kPrefix);
    while (dirent *e = readdir(d)) {
        const char *name = e->d_name;
        if (strncmp(name, kPrefix, plen) != 0) continue;
        char *end = nullptr;
        long pid = strtol(name + plen, &end, 10);
        if (end == name + plen || *end != '-' || pid <= 0) continue;
        if (pid != getpid() && !alive(pid)) stale.push_back(name);
    }
    closedir(d);
    for (const std::string &name : stale) run_command({"ip", "netns", "del", name});
}

// --------------------------------------------------------------- LineChannel

LineChannel::~LineChannel() {
    if (fd_ >= 0) close(fd_);
}

LineChannel::LineChannel(LineChannel &&o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)) {
    o.fd_ = -1;
}

LineChannel &LineChannel::operator=(LineChannel &&o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) close(fd_);
        fd_ = o.fd_;
        buf_ = std::move(o.buf_);
        o.fd_ = -1;
    }
    return *this;
}

void LineChannel::say(const std::string &line) {
    std::string s = line + "\n";
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; // the other end is gone: it will not hear anything more
        done += static_cast<size_t>(n);
    }
}

std::optional<std::string> LineChannel::hear(int timeout_ms) {
    uint64_t deadline = mono_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    for (;;) {
        size_t nl = buf_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            return line;
        }
        pollfd p{fd_, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms == 0 ? 0 : static_cast<int>(left_ms(deadline)));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return std::nullopt;
        char buf[256];
        ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        buf_.append(buf, static_cast<size_t>(n));
    }
}

LineChannel &side_channel() {
    static LineChannel ch(kSideFd);
    return ch;
}

} // namespace vt
