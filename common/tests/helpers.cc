#include "helpers.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

namespace vt {

const std::vector<std::string> &providers() {
    static const std::vector<std::string> p{"vipl+shm://127.0.0.1", "vipl+tcp://127.0.0.1"};
    return p;
}

vipl::Listener bind_free(const std::string &base, const vipl::StreamOptions &o) {
    std::error_code ec;
    auto l = vipl::Listener::bind(base + ":0", ec, o); // the listener picks a free port
    INFO(base << ": " << ec.message());
    REQUIRE(!ec);
    REQUIRE(l.uri().port != 0);
    return l;
}

Pair connect_pair(const std::string &base, const vipl::StreamOptions &o) {
    auto l = bind_free(base, o);
    Pair p;
    std::error_code aec;
    std::thread t([&] { p.server = l.accept(vipl::deadline_in(std::chrono::seconds(10)), aec); });
    std::error_code cec;
    p.client = vipl::Stream::connect(l.uri(), vipl::deadline_in(std::chrono::seconds(10)), cec, o);
    t.join();
    REQUIRE(!cec);
    REQUIRE(!aec);
    return p;
}

Pair::~Pair() {
    std::thread t([&] { server.close(vipl::deadline_in(std::chrono::seconds(5))); });
    client.close(vipl::deadline_in(std::chrono::seconds(5)));
    t.join();
}

int spawn(const std::function<int()> &fn) {
    int pid = fork();
    if (pid == 0) {
        int rc = 97;
        try {
            rc = fn();
        } catch (...) {
            rc = 98;
        }
        _exit(rc);
    }
    return pid;
}

int spawn_client(const vipl::Uri &uri, const vipl::StreamOptions &o,
                 const std::function<int(vipl::Stream &)> &fn) {
    return spawn([&] {
        std::error_code ec;
        auto s = vipl::Stream::connect(uri, vipl::deadline_in(std::chrono::seconds(10)), ec, o);
        return ec ? 2 : fn(s);
    });
}

vipl::Stream accept_one(vipl::Listener &l) {
    std::error_code ec;
    auto s = l.accept(vipl::deadline_in(std::chrono::seconds(10)), ec);
    REQUIRE(!ec);
    return s;
}

bool readable(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int wait_child(int pid, int timeout_s) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
        int r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

void fill(std::byte *p, size_t n, uint64_t offset, uint32_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = std::byte{pattern(offset + i, seed)};
}

int64_t check(const std::byte *p, size_t n, uint64_t offset, uint32_t seed) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != std::byte{pattern(offset + i, seed)}) return static_cast<int64_t>(offset + i);
    return -1;
}

bool write_all(vipl::Stream &s, const std::byte *p, size_t n) {
    size_t done = 0;
    while (done < n) {
        std::error_code ec;
        done += s.write({p + done, n - done}, ec);
        if (ec && ec != std::errc::interrupted) return false;
    }
    return true;
}

int run_fresh(const std::string &name, const std::vector<std::string> &env, int timeout_s) {
    int pid = fork();
    if (pid == 0) {
        for (const std::string &e : env) putenv(const_cast<char *>(e.c_str()));
        // "-w NoTests": a name that matches nothing (a renamed case) must not pass silently.
        execl("/proc/self/exe", "vipl-common-tests", "-w", "NoTests", name.c_str(),
              static_cast<char *>(nullptr));
        _exit(127);
    }
    return wait_child(pid, timeout_s);
}

bool read_exact(vipl::Stream &s, std::byte *p, size_t n, std::chrono::milliseconds each) {
    size_t done = 0;
    while (done < n) {
        std::error_code ec;
        size_t k = s.read({p + done, n - done}, vipl::deadline_in(each), ec);
        if (ec == std::errc::interrupted) continue;
        if (ec || k == 0) return false;
        done += k;
    }
    return true;
}

uint64_t read_checked(vipl::Stream &s, uint64_t total, uint32_t seed, ReadHow how, size_t buf_size,
                      std::error_code *ec_out) {
    std::vector<std::byte> buf(buf_size);
    std::mt19937_64 rng(seed);
    if (how == ReadHow::polling) s.set_nonblocking(true);
    uint64_t off = 0;
    std::error_code ec;
    auto end = vipl::Clock::now() + std::chrono::seconds(30);
    while (off < total && vipl::Clock::now() < end) {
        size_t want = how == ReadHow::random ? 1 + rng() % buf.size() : buf.size();
        size_t n = how == ReadHow::deadline
                       ? s.read({buf.data(), want}, vipl::deadline_in(std::chrono::seconds(10)), ec)
                       : s.read({buf.data(), want}, ec);
        if (ec == std::errc::operation_would_block) {
            pollfd p{s.fd(), POLLIN, 0};
            poll(&p, 1, 1000);
            ec.clear();
            continue;
        }
        if (ec || n == 0 || check(buf.data(), n, off, seed) >= 0) break;
        off += n;
    }
    if (how == ReadHow::polling) s.set_nonblocking(false);
    if (ec_out) *ec_out = ec;
    return off;
}

int write_pattern_until_error(vipl::Stream &s, size_t chunk, uint32_t seed) {
    std::error_code ec;
    std::vector<std::byte> buf(chunk);
    for (uint64_t off = 0; !ec; off += buf.size()) {
        fill(buf.data(), buf.size(), off, seed);
        s.write(buf, ec); // killed in here, or between two writes
    }
    return 0;
}

KilledWriter read_killing_writer(vipl::Stream &s, int pid, uint64_t kill_after, uint32_t seed,
                                 size_t buf_size) {
    KilledWriter r;
    std::vector<std::byte> buf(buf_size);
    uint64_t got = 0;
    auto t0 = vipl::Clock::now();
    while (!r.ec && vipl::Clock::now() - t0 < std::chrono::seconds(15)) {
        if (!r.killed && got >= kill_after) {
            kill(pid, SIGKILL);
            r.killed = true;
        }
        size_t n = s.read(buf, r.ec); // no deadline: regions straight into buf
        if (check(buf.data(), n, got, seed) >= 0) FAIL("bad byte after " << got);
        got += n;
    }
    return r;
}

void *map(size_t bytes) {
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
}

void unmap(void *p, size_t bytes) {
    munmap(p, bytes);
}

int count_fds() {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (dirent *e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n - 1; // the directory's own descriptor
}

int count_maps() {
    std::ifstream f("/proc/self/maps");
    std::string line;
    int n = 0;
    while (std::getline(f, line)) ++n;
    return n;
}

bool wait_for(const std::function<bool()> &pred, int timeout_ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pred();
}

} // namespace vt
