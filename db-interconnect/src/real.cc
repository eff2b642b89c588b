#include "real.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace vipl::db {

constinit RealCalls g_real{};

void load_real_calls() noexcept {
#define VIPL_DB_REAL_LOAD(name, ret, params)                                                       \
    g_real.name = reinterpret_cast<ret(*) params>(dlsym(RTLD_NEXT, #name));
    VIPL_DB_REAL_CALLS(VIPL_DB_REAL_LOAD)
#undef VIPL_DB_REAL_LOAD
    // A libc without one of these cannot run the programs we serve: say so and stop
    // rather than call through a null pointer later.
    if (!g_real.socket || !g_real.close || !g_real.read || !g_real.poll || !g_real.epoll_wait ||
        !g_real.fork || !g_real.sigaction) {
        static const char msg[] = "libvipl-db: the C library lacks the socket calls\n";
        // Not write(): that is our own wrapper, which needs this table.
        syscall(SYS_write, 2, msg, sizeof msg - 1);
        abort();
    }
    __atomic_store_n(&g_real.ready, true, __ATOMIC_RELEASE);
}

} // namespace vipl::db
