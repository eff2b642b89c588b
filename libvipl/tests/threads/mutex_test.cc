// The library's lock takes no locked instruction while the process has one
// thread.  It must still hold off a thread started while it is held, and be a
// lock among threads from then on.
#include "core/mutex.h"
#include "thr_util.h"

#include <atomic>
#include <sys/single_threaded.h>
#include <thread>

TEST_CASE("mutex (fresh process)", "[.][threads-mutex]") {
    REQUIRE(__libc_single_threaded); // a new program: one thread so far
    vipl::Mutex m;
    m.lock();
    CHECK_FALSE(m.try_lock());
    m.unlock();
    REQUIRE(m.try_lock());

    // Held by the only thread when a second one starts and asks for it.
    std::atomic<int> stage{0};
    std::thread t([&] {
        stage = 1;
        m.lock();
        stage = 2;
        m.unlock();
    });
    for (int i = 0; i < 2000 && stage.load() == 0; ++i) vt::sleep_ms(1);
    vt::sleep_ms(50);
    CHECK(stage.load() == 1);
    m.unlock();
    t.join();
    CHECK(stage.load() == 2);
    CHECK_FALSE(__libc_single_threaded);

    // Among threads now.
    long counter = 0;
    auto add = [&] {
        for (int i = 0; i < 200000; ++i) {
            m.lock();
            ++counter;
            m.unlock();
        }
    };
    std::thread a(add), b(add);
    add();
    a.join();
    b.join();
    CHECK(counter == 600000);
}

TEST_CASE("The library's lock taken by a lone thread holds off a thread started under it",
          "[mutex]") {
    int status = vt::run_fresh("mutex (fresh process)", {}, 60);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}
