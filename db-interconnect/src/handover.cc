#include "handover.h"

#include "config.h"
#include "epoll_set.h"
#include "files.h"
#include "kernel_io.h"
#include "log.h"
#include "real.h"
#include "thread_state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace vipl::db {

namespace {

struct Held {
    int fd;
    Sock *sock;
};

void collect(int fd, File *f, void *arg) {
    if (f->kind != File::Kind::sock) return;
    auto *s = static_cast<Sock *>(f);
    if (file_try_acquire(s)) static_cast<std::vector<Held> *>(arg)->push_back({fd, s});
}

// Reads the stream until the peer's switching end (or the deadline); what came.
std::string drain(Sock *s, Deadline dl, bool *switched) {
    std::string got;
    std::vector<std::byte> buf(64 * 1024);
    for (;;) {
        std::error_code ec;
        size_t n = s->stream.read(buf, dl, ec);
        if (ec == std::errc::interrupted) continue;
        if (n > 0) {
            got.append(reinterpret_cast<const char *>(buf.data()), n);
            continue;
        }
        *switched = !ec && s->stream.peer_switched();
        return got;
    }
}

// Hands one socket over; returns its VIPL_HANDOVER entry ("" when nothing to hand).
std::string hand_over(Sock *s, int fd) {
    Deadline dl = Clock::now() + std::chrono::milliseconds(config().negotiate_ms);
    std::error_code ec;
    s->stream.flush(dl);
    s->stream.switch_out(ec);
    bool switched = false;
    std::string rest = drain(s, dl, &switched);
    if (!switched) {
        VIPL_DB_ERROR("fd %d: the peer did not take the connection back to the kernel in "
                      "time; it is reset",
                      fd);
        s->stream.abort();
    } else {
        s->stream.close(dl);
    }
    uint64_t kernel_first = s->pre_bytes;
    s->pre_bytes = 0;
    s->state.store(SockState::plain);
    s->prefix = rest;
    s->prefix_off = 0;
    s->pre_bytes = kernel_first;
    epoll_sock_changed(s);
    int m = memfd_create("vipl-db-handover", 0);
    if (m < 0) return "";
    size_t done = 0;
    while (done < rest.size()) {
        ssize_t w = real().write(m, rest.data() + done, rest.size() - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
    }
    return std::to_string(fd) + ":" + std::to_string(m) + ":" + std::to_string(done) + ":" +
           std::to_string(kernel_first);
}

} // namespace

std::string handover_before_exec() noexcept {
    Inside in;
    std::vector<Held> held;
    fd_for_each(collect, &held);
    std::string value;
    for (Held &h : held) {
        Sock *s = h.sock;
        int fl = real().fcntl(h.fd, F_GETFD);
        if (fl >= 0 && !(fl & FD_CLOEXEC)) {
            // A decision in progress finishes first (as before fork), then the stream
            // hands its place back to the kernel socket.
            SockState st = s->state.load();
            if (st == SockState::hello_sent || st == SockState::accepting ||
                st == SockState::connecting)
                sock_before_fork(s, h.fd);
            std::lock_guard<std::mutex> g(s->mu);
            if (s->state.load() == SockState::vipl && s->stream.is_open()) {
                std::string e = hand_over(s, h.fd);
                if (!e.empty()) value += (value.empty() ? "" : ",") + e;
            }
        }
        file_release(s);
    }
    return value;
}

void handover_adopt() noexcept {
    const char *v = getenv(kHandoverVar);
    if (!v || !*v) return;
    std::string text(v);
    unsetenv(kHandoverVar);
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find(',', pos);
        if (end == std::string::npos) end = text.size();
        int fd = -1, m = -1;
        unsigned long long len = 0, first = 0;
        if (sscanf(text.substr(pos, end - pos).c_str(), "%d:%d:%llu:%llu", &fd, &m, &len, &first) ==
                4 &&
            fd >= 0 && m >= 0) {
            std::string bytes(len, '\0');
            size_t got = len ? static_cast<size_t>(pread(m, bytes.data(), len, 0)) : 0;
            real().close(m);
            sockaddr_storage ss{};
            socklen_t sl = sizeof ss;
            if (got == len && getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl) == 0) {
                Sock *s = sock_new(SockState::plain, ss.ss_family);
                if (s) {
                    s->prefix = std::move(bytes);
                    s->prefix_off = 0;
                    s->pre_bytes = first;
                    int fl = real().fcntl(fd, F_GETFL);
                    s->nonblock = fl >= 0 && (fl & O_NONBLOCK);
                    if (File *old = fd_install(fd, s)) file_release(old);
                }
            }
        }
        pos = end + 1;
    }
}

void switch_to_kernel(Sock *s, int fd) noexcept {
    Inside in;
    // Our own switching end: what we wrote on the stream so far is read there, the rest
    // goes to the kernel socket.
    std::error_code ec;
    s->stream.flush(Clock::now() + std::chrono::milliseconds(config().negotiate_ms));
    s->stream.switch_out(ec);
    linger_stream(std::move(s->stream));
    s->state.store(SockState::plain);
    epoll_sock_changed(s);
    if (fd >= 0)
        VIPL_DB_INFO("fd %d goes back to its kernel socket (an exec on either side)", fd);
    else
        VIPL_DB_INFO("a connection goes back to its kernel socket (an exec on either side)");
}

} // namespace vipl::db
