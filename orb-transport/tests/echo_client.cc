// The echo client of the tests: echo-client <IOR> <mode> [args] [ORB options].
// Prints "ok" and "vipl_connected=<n>" (-1 without the plug-in) and exits 0 on success;
// exit 2 = a check failed, 3 = a CORBA exception (its name printed), 4 = wrong usage.
#include "echo.hh"

#include <omniORB4/omniORB.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <iostream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

struct Stats {
    uint64_t accepted, connected;
};

long long vipl_connected() {
    using Fn = void (*)(Stats *);
    auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "vipl_omni_get_stats"));
    if (!fn) return -1;
    Stats s{};
    fn(&s);
    return static_cast<long long>(s.connected);
}

EchoTest::Bytes pattern(size_t n, unsigned seed) {
    EchoTest::Bytes b;
    b.length(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<CORBA::Octet>((i * 131 + seed) >> 3);
    return b;
}

bool same(const EchoTest::Bytes &a, const EchoTest::Bytes &b) {
    return a.length() == b.length() &&
           (a.length() == 0 || memcmp(a.get_buffer(), b.get_buffer(), a.length()) == 0);
}

bool echo_sizes(EchoTest::Echo_ptr e) {
    e->ping();
    for (size_t n : {size_t(0), size_t(1024), size_t(64 * 1024), size_t(16 << 20)}) {
        EchoTest::Bytes in = pattern(n, static_cast<unsigned>(n));
        EchoTest::Bytes_var out = e->bounce(in);
        if (!same(in, out.in())) {
            fprintf(stderr, "echo of %zu bytes differs\n", n);
            return false;
        }
    }
    return true;
}

bool concurrent(EchoTest::Echo_ptr e, int threads, int calls) {
    std::atomic<bool> good{true};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            try {
                EchoTest::Bytes in = pattern(1024 + t, t);
                for (int i = 0; i < calls && good; ++i) {
                    EchoTest::Bytes_var out = e->bounce(in);
                    if (!same(in, out.in())) good = false;
                }
            } catch (CORBA::Exception &ex) {
                fprintf(stderr, "thread %d: %s\n", t, ex._name());
                good = false;
            }
        });
    for (auto &t : ts) t.join();
    return good;
}

} // namespace

int main(int argc, char **argv) {
    alarm(100);
    CORBA::ORB_var orb = CORBA::ORB_init(argc, argv);
    if (argc < 3) return 4;
    std::string mode = argv[2];
    int rc = 0;
    try {
        CORBA::Object_var obj = orb->string_to_object(argv[1]);
        EchoTest::Echo_var e = EchoTest::Echo::_narrow(obj);
        if (mode == "sizes") {
            rc = echo_sizes(e) ? 0 : 2;
        } else if (mode == "concurrent") {
            int threads = argc > 3 ? atoi(argv[3]) : 4, calls = argc > 4 ? atoi(argv[4]) : 100;
            rc = concurrent(e, threads, calls) ? 0 : 2;
        } else if (mode == "timeout") {
            omniORB::setClientCallTimeout(e, 300);
            auto t0 = std::chrono::steady_clock::now();
            try {
                e->sleepMs(3000);
                rc = 2;
            } catch (CORBA::TIMEOUT &) {
            } catch (CORBA::TRANSIENT &) {
            }
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
            printf("timeout_ms=%lld\n", static_cast<long long>(ms));
            if (ms > 2000) rc = 2;
        } else if (mode == "death") {
            e->ping();
            printf("pinged\n");
            fflush(stdout);
            try {
                e->sleepMs(20000);
                rc = 2;
            } catch (CORBA::COMM_FAILURE &) {
                printf("COMM_FAILURE\n");
            } catch (CORBA::TRANSIENT &) {
                printf("TRANSIENT\n");
            }
        } else if (mode == "restart") {
            e->ping();
            printf("pinged\n");
            fflush(stdout);
            std::string line;
            std::getline(std::cin, line); // the server was restarted
            bool done = false;
            for (int i = 0; i < 20 && !done; ++i) {
                try {
                    e->ping();
                    done = true;
                } catch (CORBA::TRANSIENT &) {
                    usleep(100000);
                } catch (CORBA::COMM_FAILURE &) {
                    usleep(100000);
                }
            }
            rc = done ? 0 : 2;
        } else if (mode == "idle") {
            e->ping();
            sleep(static_cast<unsigned>(argc > 3 ? atoi(argv[3]) : 3));
            e->ping();
        } else if (mode == "shutdown") {
            rc = concurrent(e, 3, 10) ? 0 : 2;
            e->shutdown();
        } else if (mode == "server-accepted") {
            printf("server_accepted=%lld\n", static_cast<long long>(e->viplAccepted()));
        } else {
            return 4;
        }
    } catch (CORBA::Exception &ex) {
        printf("exception %s\n", ex._name());
        rc = 3;
    }
    if (rc == 0) printf("ok\n");
    printf("vipl_connected=%lld\n", vipl_connected());
    fflush(stdout);
    orb->destroy();
    return rc;
}
