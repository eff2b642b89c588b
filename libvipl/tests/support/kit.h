// Helpers with neither Catch2 nor exceptions, usable in forked workers and in the
// benches (support/procs.h and the scale tests' fleet build on them): the clock, text,
// the environment, and VIPL addresses on this host.
#pragma once

#include <vipl.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace vt {

// The monotonic clock in milliseconds; sleeping for some.
double now_ms();
void sleep_ms(double ms);
// A sleep on a word in memory shared between processes (a futex): wait_word returns
// once *w differs from seen, wake_word was called, or timeout_ms passed (or at once if
// *w differs already).  Many processes waiting for a turn cost nothing while they wait,
// where polling them would load the machine the test runs on.
void wait_word(const std::atomic<int> &w, int seen, double timeout_ms);
void wake_word(std::atomic<int> &w);
// printf into a string (at most 1 KiB).
std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
// An integer or text parameter a parent passed to a fresh process.
long env_long(const char *name, long def);
std::string env_str(const char *name, const std::string &def = "");

// The address of discriminator disc on this host ("localhost" by the NIC's name
// service; no host part when that fails), and views of one.
std::vector<uint8_t> address(VIP_NIC_HANDLE nic, const std::string &disc);
inline VIP_NET_ADDRESS *net(std::vector<uint8_t> &a) {
    return reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
}
std::string disc_of(const VIP_NET_ADDRESS *a);
// The abstract socket an shm server listening on disc binds, as /proc/net/unix shows it
// ("@vipl-shm-cs:<hex of disc>").
std::string listener_socket(const std::string &disc);

} // namespace vt
