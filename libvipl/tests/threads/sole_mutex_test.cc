// The robust lock's sole sections (core/mutex.h): while one single-threaded
// process holds a shareable object, its lock is a store.  Whatever joins it
// (a fork child, a thread started under the lock) must still be held off until
// the section ends, a holder that dies in one must not wedge the others, and a
// holder that leaves while holding the robust lock must be waited for.  The
// census here is kept by hand the way Holders keeps it (process.cc).
#include "core/mutex.h"
#include "thr_util.h"

#include <atomic>
#include <csignal>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

// Shared between the processes of a case.
struct Shared {
    vipl::Mutex m;
    std::atomic<uint64_t> census{0};
    std::atomic<int> stage{0};
    std::atomic<int> child_saw_stage{-1};
    std::atomic<int> child_died_flag{-1};
    long counter = 0; // guarded by m
    // token -> pid of every holder, for the liveness question
    std::atomic<uint64_t> token[4];
    std::atomic<int> pid[4];
};

bool alive(const void *set, uint64_t t) {
    auto *s = static_cast<const Shared *>(set);
    for (int i = 0; i < 4; ++i)
        if (s->token[i].load() == t) {
            int p = s->pid[i].load();
            int st = 0;
            // A child of ours that exited is not alive (reaped or not).
            if (waitpid(p, &st, WNOHANG) == p) return false;
            return kill(p, 0) == 0;
        }
    return false;
}

Shared *make_shared() {
    void *p =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    auto *s = new (p) Shared();
    s->m.make_robust({&s->census, alive, s});
    s->token[0] = vipl::self_token();
    s->pid[0] = getpid();
    s->census = vipl::sole_census(vipl::self_token());
    return s;
}

// What the fork handler does: the child's token joins the census before fork().
uint64_t add_child(Shared *s) {
    uint64_t t = vipl::new_token();
    uint64_t c = s->census.load();
    s->census = ((((c >> 56) + 1)) << 56) | ((c ^ t) & vipl::kCensusTokenBits);
    s->token[1] = t;
    return t;
}

void remove_holder(Shared *s, uint64_t t) {
    uint64_t c = s->census.load();
    s->census = ((((c >> 56) - 1)) << 56) | ((c ^ t) & vipl::kCensusTokenBits);
}

int wait_child(pid_t p) {
    int st = 0;
    for (int i = 0; i < 10000; ++i) {
        if (waitpid(p, &st, WNOHANG) == p) return st;
        vt::sleep_ms(1);
    }
    kill(p, SIGKILL);
    waitpid(p, &st, 0);
    return -1;
}

} // namespace

TEST_CASE("sole mutex: a child forked inside a sole section waits until the parent's unlock (fresh "
          "process)",
          "[.][threads-sole-mutex]") {
    REQUIRE(__libc_single_threaded);
    Shared *s = make_shared();
    s->m.lock(); // sole: this process is the only holder
    uint64_t t = add_child(s);
    pid_t p = fork();
    if (p == 0) {
        vipl::set_self_token(t);
        s->pid[1] = getpid();
        s->m.lock();
        s->child_saw_stage = s->stage.load();
        ++s->counter;
        s->m.unlock();
        _exit(0);
    }
    s->pid[1] = p;
    vt::sleep_ms(100); // the child asks for the lock meanwhile
    s->stage = 1;
    ++s->counter;
    s->m.unlock();
    CHECK(wait_child(p) == 0);
    CHECK(s->child_saw_stage.load() == 1);
    CHECK(s->counter == 2);
}

TEST_CASE("sole mutex: a holder that dies in a sole section after a fork leaves the lock to the "
          "child (fresh process)",
          "[.][threads-sole-mutex]") {
    REQUIRE(__libc_single_threaded);
    Shared *s = make_shared();
    // A process of its own (this one must stay) becomes the only holder, takes a
    // sole section, forks a child that asks for the lock, and dies in the section.
    uint64_t t = vipl::new_token();
    s->token[1] = t;
    pid_t dier = fork();
    if (dier == 0) {
        uint64_t mine = vipl::new_token();
        vipl::set_self_token(mine);
        s->token[2] = mine;
        s->pid[2] = getpid();
        s->census = vipl::sole_census(mine);
        s->m.lock(); // sole
        s->census = (uint64_t(2) << 56) | ((mine ^ t) & vipl::kCensusTokenBits);
        pid_t c = fork();
        if (c == 0) {
            vipl::set_self_token(t);
            s->pid[1] = getpid();
            s->stage = 2; // asking now
            s->m.lock();
            s->child_died_flag = s->m.owner_died() ? 1 : 0;
            s->m.clear_owner_died();
            s->m.unlock();
            _exit(0);
        }
        s->pid[1] = c;
        for (int i = 0; i < 5000 && s->stage.load() != 2; ++i) vt::sleep_ms(1);
        vt::sleep_ms(20);
        _exit(0); // dies holding its sole section
    }
    CHECK(wait_child(dier) == 0);
    for (int i = 0; i < 20000 && s->child_died_flag.load() < 0; ++i) vt::sleep_ms(1);
    CHECK(s->child_died_flag.load() == 1);
}

TEST_CASE("sole mutex: a holder leaving with the robust lock held is waited for by the one that "
          "stays (fresh process)",
          "[.][threads-sole-mutex]") {
    REQUIRE(__libc_single_threaded);
    Shared *s = make_shared();
    uint64_t t = add_child(s);
    pid_t p = fork();
    if (p == 0) {
        vipl::set_self_token(t);
        s->m.lock(); // two holders: the robust lock
        remove_holder(s, t);
        s->stage = 3; // the parent is alone in the census now
        vt::sleep_ms(100);
        s->child_saw_stage = 4;
        s->m.unlock();
        _exit(0);
    }
    for (int i = 0; i < 5000 && s->stage.load() != 3; ++i) vt::sleep_ms(1);
    REQUIRE(s->census.load() == vipl::sole_census(vipl::self_token()));
    s->m.lock();
    CHECK(s->child_saw_stage.load() == 4); // not before the leaver's unlock
    s->m.unlock();
    CHECK(wait_child(p) == 0);
}

TEST_CASE("sole mutex: a thread started inside a sole section waits for it and then shares the "
          "lock (fresh process)",
          "[.][threads-sole-mutex]") {
    REQUIRE(__libc_single_threaded);
    Shared *s = make_shared();
    s->m.lock();
    std::atomic<int> got{0};
    std::thread th([&] {
        s->m.lock();
        got = s->stage.load() == 5 ? 1 : 2;
        s->m.unlock();
    });
    vt::sleep_ms(100);
    s->stage = 5;
    s->m.unlock();
    th.join();
    CHECK(got.load() == 1);
    long n = 0;
    auto add = [&] {
        for (int i = 0; i < 100000; ++i) {
            s->m.lock();
            ++s->counter;
            s->m.unlock();
        }
    };
    std::thread a(add);
    add();
    a.join();
    n = s->counter;
    CHECK(n == 200000);
}

TEST_CASE(
    "sole mutex: parent and child count under the lock through three rounds of fork and leave "
    "(fresh process)",
    "[.][threads-sole-mutex]") {
    REQUIRE(__libc_single_threaded);
    Shared *s = make_shared();
    for (int round = 0; round < 3; ++round) {
        uint64_t t = add_child(s);
        pid_t p = fork();
        if (p == 0) {
            vipl::set_self_token(t);
            for (int i = 0; i < 100000; ++i) {
                s->m.lock();
                ++s->counter;
                s->m.unlock();
            }
            s->m.lock();
            remove_holder(s, t);
            s->m.unlock();
            _exit(0);
        }
        s->pid[1] = p;
        for (int i = 0; i < 100000; ++i) {
            s->m.lock();
            ++s->counter;
            s->m.unlock();
        }
        CHECK(wait_child(p) == 0);
        CHECK(s->census.load() == vipl::sole_census(vipl::self_token()));
        for (int i = 0; i < 1000; ++i) { // alone again: sole sections
            s->m.lock();
            ++s->counter;
            s->m.unlock();
        }
    }
    CHECK(s->counter == 3 * 201000);
}

TEST_CASE("A robust lock taken as a store by a lone holder still holds off a fork child, a "
          "thread, and a leaver's hold, and survives a holder dying in it",
          "[mutex]") {
    for (const char *name :
         {"a child forked inside a sole section waits until the parent's unlock",
          "a holder that dies in a sole section after a fork leaves the lock to the child",
          "a holder leaving with the robust lock held is waited for by the one that stays",
          "a thread started inside a sole section waits for it and then shares the lock",
          "parent and child count under the lock through three rounds of fork and leave"}) {
        int status =
            vt::run_fresh(std::string("sole mutex: ") + name + " (fresh process)", {}, 120);
        INFO(name << ": " << vt::status_text(status));
        CHECK(status == 0);
    }
}
