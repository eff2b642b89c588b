#include "kit.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

namespace vt {

double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void sleep_ms(double ms) {
    std::this_thread::sleep_for(std::chrono::microseconds(long(ms * 1000)));
}

static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);

void wait_word(const std::atomic<int> &w, int seen, double timeout_ms) {
    timespec ts{static_cast<time_t>(timeout_ms / 1000),
                static_cast<long>(std::fmod(timeout_ms, 1000.0) * 1e6)};
    // Not FUTEX_PRIVATE: the waker is another process.
    syscall(SYS_futex, reinterpret_cast<const int *>(&w), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void wake_word(std::atomic<int> &w) {
    syscall(SYS_futex, reinterpret_cast<int *>(&w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string fmt(const char *f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

long env_long(const char *name, long def) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, nullptr, 0) : def;
}

std::string env_str(const char *name, const std::string &def) {
    const char *v = getenv(name);
    return v ? v : def;
}

std::vector<uint8_t> address(VIP_NIC_HANDLE nic, const std::string &disc) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
    auto *na = net(a);
    char host[] = "localhost";
    if (VipNSGetHostByName(nic, host, na, 0) != VIP_SUCCESS) na->HostAddressLen = 0;
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
    return a;
}

std::string disc_of(const VIP_NET_ADDRESS *a) {
    return std::string(reinterpret_cast<const char *>(a->HostAddress + a->HostAddressLen),
                       a->DiscriminatorLen);
}

std::string listener_socket(const std::string &disc) {
    static const char hex[] = "0123456789abcdef";
    std::string s = "@vipl-shm-cs:";
    for (unsigned char c : disc) {
        s += hex[c >> 4];
        s += hex[c & 15];
    }
    return s;
}

} // namespace vt
