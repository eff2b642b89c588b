#include "prov/util/unix_socket.h"

#include "core/fds.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace vipl::util {

socklen_t abstract_address(std::string_view name, sockaddr_un *sa) {
    *sa = sockaddr_un{};
    sa->sun_family = AF_UNIX;
    if (name.size() + 1 > sizeof sa->sun_path) return 0;
    memcpy(sa->sun_path + 1, name.data(), name.size());
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

int seqpacket_socket() {
    return fd_track(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
}

bool send_with_fds(int sock, const void *msg, size_t len, const int *fds, int nfds) {
    if (nfds < 0 || nfds > kMaxFds) return false;
    iovec iov{const_cast<void *>(msg), len};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (nfds > 0) {
        mh.msg_control = control;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

Recv recv_with_fds(int sock, void *msg, size_t len, int *fds, int max_fds, int *nfds) {
    *nfds = 0;
    for (;;) {
        iovec iov{msg, len};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
        mh.msg_control = control;
        mh.msg_controllen = sizeof control;
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n >= 0) {
            for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
                int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                const unsigned char *data = CMSG_DATA(c);
                for (int i = 0; i < count; ++i) {
                    int fd;
                    memcpy(&fd, data + i * sizeof(int), sizeof fd);
                    if (*nfds < max_fds)
                        fds[(*nfds)++] = fd_track(fd);
                    else
                        close(fd);
                }
            }
            if (n == 0) return Recv::eof;
            if (static_cast<size_t>(n) != len || (mh.msg_flags & MSG_TRUNC)) return Recv::error;
            if (mh.msg_flags & MSG_CTRUNC) return Recv::no_room;
            return Recv::ok;
        }
        if (errno == EINTR) continue;
        return errno == EAGAIN ? Recv::again : Recv::error;
    }
}

} // namespace vipl::util
