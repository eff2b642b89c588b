// Small operations on the kernel connection, for the negotiation: they go straight to
// the real calls and keep errno as they found it unless they report through it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <time.h>

namespace vipl::db {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The time left until deadline, as the timeout of ppoll and its kin: ts filled and
// returned (zero once the deadline passed), or nullptr, no timeout, for Deadline::max().
timespec *time_left(Deadline deadline, timespec *ts) noexcept;
// Up to len bytes at the head of the connection, without taking them: >0 bytes,
// 0 end of stream, -1 with errno (EAGAIN: nothing yet).
ssize_t kpeek(int fd, void *buf, size_t len) noexcept;
// Takes exactly len bytes that a peek showed are there; false on a short read.
bool kdrop(int fd, size_t len) noexcept;
// Waits until fd reports one of events or the deadline passes: the revents, 0 on
// timeout, -1 when a signal handler ran (errno EINTR) or on an error.
int kwait(int fd, short events, Deadline deadline) noexcept;
// Waits until fd or fd2 is readable or the deadline passes: 1, 0 on timeout, -1 with errno.
int kwait2(int fd, int fd2, Deadline deadline) noexcept;
// Writes all of buf, waiting for room until the deadline (signals do not end it).
// False when the connection failed or the deadline passed (*sent says how much went).
bool ksend_all(int fd, const void *buf, size_t len, Deadline deadline, size_t *sent) noexcept;
// The local and peer addresses share an IP address: a TCP connection within this host.
// Unix connections always are.
bool same_host(int fd) noexcept;
// Cryptographically random bytes (getrandom); false if the kernel had none.
bool random_bytes(uint8_t *out, size_t len) noexcept;

} // namespace vipl::db
