#include "case_guard.h"

#include "kit.h"

// Listener classes are among the "external interfaces".
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <vipl_ext.h>

#include <atomic>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>
#include <vector>

namespace vt {
namespace {

// ---------------------------------------------------------- error lines

// The handler runs in any thread of the library, under its locks, and in fork
// children whose other threads vanished: no lock here, only a ring of lines
// and a count.
constexpr int kLines = 32;
struct LoggedLine {
    char text[240];
};
LoggedLine g_lines[kLines];
std::atomic<unsigned> g_logged{0};

void on_log(VIP_PVOID, VIP_ULONG level, const VIP_CHAR *text) {
    if (level != VIP_LOG_ERROR) return;
    unsigned n = g_logged.fetch_add(1, std::memory_order_acq_rel);
    LoggedLine &l = g_lines[n % kLines];
    strncpy(l.text, text, sizeof l.text - 1);
    l.text[sizeof l.text - 1] = '\0';
}

std::vector<std::string> g_expected; // this case's announced errors

// ---------------------------------------------------------- the inventory

struct Inventory {
    std::map<int, std::string> fds;     // descriptor -> what it points at
    std::map<std::string, int> threads; // thread name -> how many
    std::set<std::string> shm;          // our /dev/shm entries
    unsigned logged = 0;
};

std::string link_of(const std::string &path) {
    char buf[512];
    ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
    return n < 0 ? "?" : std::string(buf, static_cast<size_t>(n));
}

Inventory take() {
    Inventory inv;
    if (DIR *d = opendir("/proc/self/fd")) {
        int own = dirfd(d);
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            int fd = atoi(e->d_name);
            if (fd != own) inv.fds[fd] = link_of(std::string("/proc/self/fd/") + e->d_name);
        }
        closedir(d);
    }
    if (DIR *d = opendir("/proc/self/task")) {
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/comm");
            std::string name;
            if (std::getline(in, name)) ++inv.threads[name];
        }
        closedir(d);
    }
    std::string pid = std::to_string(getpid());
    if (DIR *d = opendir("/dev/shm")) {
        while (dirent *e = readdir(d)) {
            std::string n = e->d_name;
            if (n.find("vipl") != std::string::npos || n.find(pid) != std::string::npos)
                inv.shm.insert(n);
        }
        closedir(d);
    }
    inv.logged = g_logged.load(std::memory_order_acquire);
    return inv;
}

// What `after` holds that `before` did not, in words.
std::vector<std::string> left_behind(const Inventory &before, const Inventory &after) {
    std::vector<std::string> out;
    auto count = [](const Inventory &i, const char *name) {
        auto it = i.threads.find(name);
        return it == i.threads.end() ? 0 : it->second;
    };
    // The notification thread starts once and keeps one epoll and one eventfd.
    bool notifier_started = count(after, "vipl-notify") > count(before, "vipl-notify");
    int epolls = notifier_started ? 1 : 0, eventfds = notifier_started ? 1 : 0;
    bool had_stats = false;
    for (const auto &[fd, what] : before.fds)
        had_stats = had_stats || what.rfind("/memfd:vipl-db-stats", 0) == 0;
    for (const auto &[fd, what] : after.fds) {
        auto b = before.fds.find(fd);
        if (b != before.fds.end() && b->second == what) continue;
        if (what == "anon_inode:[eventpoll]" && epolls > 0) {
            --epolls;
            continue;
        }
        if (what == "anon_inode:[eventfd]" && eventfds > 0) {
            --eventfds;
            continue;
        }
        if (what.rfind("/memfd:vipl-db-stats", 0) == 0 && !had_stats) {
            had_stats = true;
            continue;
        }
        out.push_back(fmt("descriptor %d (%s)", fd, what.c_str()));
    }
    for (const auto &[name, n] : after.threads) {
        if (name == "vipl-notify") continue;
        auto b = before.threads.find(name);
        int had = b == before.threads.end() ? 0 : b->second;
        if (n > had) out.push_back(fmt("%d more thread(s) named \"%s\"", n - had, name.c_str()));
    }
    for (const std::string &e : after.shm)
        if (!before.shm.count(e)) out.push_back("/dev/shm/" + e);
    return out;
}

std::vector<std::string> unexpected_errors(unsigned from, unsigned to) {
    std::vector<std::string> out;
    if (to - from > static_cast<unsigned>(kLines))
        out.push_back(fmt("%u error lines (the last %d kept)", to - from, kLines));
    for (unsigned i = to - from > static_cast<unsigned>(kLines) ? to - kLines : from; i != to;
         ++i) {
        std::string text = g_lines[i % kLines].text;
        bool announced = false;
        for (const std::string &part : g_expected)
            announced = announced || text.find(part) != std::string::npos;
        if (!announced) out.push_back(text);
    }
    return out;
}

// ---------------------------------------------------------- the listener

class CaseGuard : public Catch::TestEventListenerBase {
public:
    using TestEventListenerBase::TestEventListenerBase;

    void testRunStarting(const Catch::TestRunInfo &info) override {
        TestEventListenerBase::testRunStarting(info);
        VipLogHandler(on_log, nullptr);
#if defined(__SANITIZE_THREAD__)
        // ThreadSanitizer starts a background thread of its own with the first thread a
        // program creates: let that happen now, not inside the first case that makes one.
        std::thread([] {}).join();
#endif
    }

    // The outermost section is the case itself: each run of the case (one per
    // leaf section) starts and ends it.
    void sectionStarting(const Catch::SectionInfo &info) override {
        TestEventListenerBase::sectionStarting(info);
        if (depth_++ != 0) return;
        g_expected.clear();
        before_ = take();
    }

    void sectionEnded(const Catch::SectionStats &stats) override {
        TestEventListenerBase::sectionEnded(stats);
        if (--depth_ != 0) return;
        // Threads and descriptors a case closed may take a moment to go (a
        // joined thread's task, a peer's socket in flight): look again, bounded.
        Inventory after = take();
        std::vector<std::string> left = left_behind(before_, after);
        for (int i = 0; i < 100 && !left.empty(); ++i) {
            sleep_ms(20);
            after = take();
            left = left_behind(before_, after);
        }
        std::vector<std::string> errors = unexpected_errors(before_.logged, after.logged);
        std::string left_text, error_text;
        for (const std::string &s : left) left_text += "\n  " + s;
        for (const std::string &s : errors) error_text += "\n  " + s;
        // CHECK, not REQUIRE: a throw would leave the listener mid-event.
        {
            INFO("the case left behind:" << left_text);
            CHECK(left.empty());
        }
        {
            INFO("the library logged errors the case did not announce (vt::expect_logged):"
                 << error_text);
            CHECK(errors.empty());
        }
    }

private:
    int depth_ = 0;
    Inventory before_;
};
CATCH_REGISTER_LISTENER(CaseGuard)

} // namespace

const int case_guard_registered = 1;

void expect_logged(const std::string &part) {
    g_expected.push_back(part);
}

} // namespace vt
