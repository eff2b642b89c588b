#include "child_process.h"

#include "clock.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace vipl::db::test {

int exit_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

namespace {

// The text after the command's closing parenthesis of /proc/<pid>/stat (" S ppid ..."),
// or "" when the process is gone.  The command may itself hold ')': the last one ends it.
std::string stat_rest(const std::string &pid) {
    std::ifstream f("/proc/" + pid + "/stat");
    std::string s;
    if (!std::getline(f, s)) return "";
    size_t p = s.rfind(')');
    return p == std::string::npos ? "" : s.substr(p + 1);
}

} // namespace

bool alive(int pid) {
    std::string rest = stat_rest(std::to_string(pid));
    // 'Z': a zombie; 'X': dead, being removed.
    return rest.size() > 1 && rest[1] != 'Z' && rest[1] != 'X';
}

std::vector<int> descendants(int pid) {
    std::multimap<int, int> children; // ppid -> pid
    if (DIR *d = opendir("/proc")) {
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            std::istringstream rest(stat_rest(e->d_name));
            char state;
            int ppid;
            if (rest >> state >> ppid) children.emplace(ppid, std::atoi(e->d_name));
        }
        closedir(d);
    }
    // Level by level; bounded, should /proc ever show a cycle.
    std::vector<int> out;
    auto add_children = [&](int p) {
        auto [a, b] = children.equal_range(p);
        for (auto it = a; it != b; ++it) out.push_back(it->second);
    };
    add_children(pid);
    for (size_t i = 0; i < out.size() && out.size() <= 100000; ++i) add_children(out[i]);
    return out;
}

void become_subreaper() {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

ChildProcess::~ChildProcess() {
    close_in();
    close_out();
}

void ChildProcess::take(ChildProcess &o) noexcept {
    pid_ = o.pid_, in_fd_ = o.in_fd_, out_fd_ = o.out_fd_, reaped_ = o.reaped_;
    status_ = o.status_, out_ = std::move(o.out_), arrivals_ = std::move(o.arrivals_);
    o.pid_ = o.in_fd_ = o.out_fd_ = -1;
    o.reaped_ = true;
}

bool ChildProcess::reap_now() {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
    reaped_ = true;
    status_ = exit_code(st);
    return true;
}

bool ChildProcess::running() {
    if (reaped_ || pid_ <= 0) return false;
    if (reap_now()) on_exit();
    return !reaped_;
}

bool ChildProcess::write_in(const std::string &data) {
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
        poll(&p, 1, pace_.write_poll_ms);
        if (pace_.read_while_writing) pump(0);
    }
    return true;
}

void ChildProcess::close_in() {
    if (in_fd_ >= 0 && in_fd_ != out_fd_) close(in_fd_);
    in_fd_ = -1;
}

void ChildProcess::close_out() {
    if (out_fd_ >= 0) close(out_fd_);
    if (in_fd_ == out_fd_) in_fd_ = -1; // a terminal: one descriptor both ways
    out_fd_ = -1;
}

void ChildProcess::pump(int ms) {
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
        if (n == 0 || (n < 0 && errno == EIO)) close_out(); // the end (a terminal gives EIO)
        return;
    }
}

size_t ChildProcess::find_output(const std::string &needle, int ms, size_t from) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    for (;;) {
        size_t at = out_.find(needle, from);
        if (at != std::string::npos) return at;
        uint64_t now = now_ns();
        if (now >= deadline) return std::string::npos;
        // Stdout closed: nothing more will come (or, as that harness wants, not before
        // the program ended).
        if (out_fd_ < 0 && (!pace_.read_until_exit || !running())) return std::string::npos;
        pump(static_cast<int>(
            std::min<uint64_t>((deadline - now) / 1000000 + 1, pace_.read_step_ms)));
    }
}

uint64_t ChildProcess::arrival_ns(size_t offset) const {
    for (const auto &[size, t] : arrivals_)
        if (size > offset) return t;
    return 0;
}

int ChildProcess::wait(int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    while (running()) {
        if (now_ns() >= deadline) return -1;
        pump(out_fd_ >= 0 ? 5 : pace_.idle_ms);
    }
    // What it wrote last (a child of its group may hold the pipe: bounded).
    for (int i = 0;
         out_fd_ >= 0 && (pace_.tail_reads < 0 ? now_ns() < deadline : i < pace_.tail_reads); ++i)
        pump(5);
    return status_;
}

void ChildProcess::signal(int sig) {
    if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

} // namespace vipl::db::test
