// The program's epoll sets, as far as interposed sockets are concerned.
//
// The kernel set stays the program's: plain descriptors are registered in it exactly as
// the program asks, with its own data.  An interposed socket is registered through a
// Member: what the kernel watches for it follows the socket's state (the kernel
// connection while it negotiates, the stream's descriptor once it rides vipl), with a
// tag of ours as data; epoll_wait turns a tag back into the program's events and data
// after asking the socket what really holds (sock_poll), drops what does not, and looks
// at streams that already hold data before sleeping.  PostgreSQL registers a socket
// before its first read, and a connection is decided at that read: the registration
// follows it.
//
// A stream's descriptor is registered edge-triggered whatever the program asked: the
// member's level is ours to give (the look before each sleep), and arming then leaves
// libvipl's doorbell unread, a system call less per sleep (Stream::arm's `edge`).
//
// Tags are the member's address XOR a per-process random key with the top bit set, kept
// in a map per set, so a program's own data never passes for one.
//
// One lock guards every set's bookkeeping (epoll_lock); it is taken after a Sock's mutex,
// never before, and never held while sleeping.  After fork, a set that parent and child
// both use is still one kernel set: each process's bookkeeping follows its own calls.
#pragma once

#include "files.h"
#include "kernel_io.h"

#include <signal.h>
#include <sys/epoll.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace vipl::db {

struct Sock;
struct EpollSet;

struct Member {
    EpollSet *set = nullptr;
    Sock *sock = nullptr; // no reference: the socket removes its members when it goes
    int fd = -1;          // the program's descriptor of the socket in this set
    epoll_event app{};    // what the program registered
    int under_fd = -1;    // what the kernel set watches for it now (-1: nothing)
    int own_fd = -1;      // a duplicate of the stream's descriptor, when a set holds two
    uint32_t under_events = 0;
    bool under_stream = false; // under_fd is the stream's (registered EPOLLET: see sync)
    int watched2 = -1;         // the second descriptor sock_under asked for (a rendezvous's)...
    int own_fd2 = -1;          // ...registered through a duplicate of ours, so that we alone end it
    uint64_t tag = 0;          // data of its registrations: tag, and tag ^ 2 for the second
    bool dirty = true;         // the socket changed: register what it needs now
    bool disabled = false;     // EPOLLONESHOT reported
    bool direct = false;       // settled on the kernel: registered as the program asked
    bool edge_fresh = true;    // EPOLLET, just (re)registered: what is there counts as new
    short edge_bits = 0;       // EPOLLET: what was reported last (a bit reports again once
    uint64_t edge_seen = 0;    // the program met EAGAIN on it, or more arrived since)
};

struct EpollSet : File {
    EpollSet() : File(Kind::epoll) {}
    int last_fd = -1; // a descriptor of this set the program used last
    std::atomic<int> nmembers{0};
    std::atomic<int> ndirect{0}; // members registered as the program asked (Member::direct)
    // The descriptor of this set whose waits skip the interposer (files.h's mark), set
    // while every member is direct; an added member clears its mark (-1: none yet).
    std::atomic<int> marked_fd{-1};
    std::unordered_map<int, Member *> by_fd;
    std::unordered_map<uint64_t, Member *> by_tag;
    // Tags whose kernel registration may outlive their member (a kernel connection the
    // program closed while another process still holds it): their events are dropped.
    std::unordered_set<uint64_t> stale;
};

std::mutex &epoll_lock();
// Whether the kernel alone can serve a wait on the set: every member is a connection
// settled on the kernel, registered as the program asked.
bool epoll_all_direct(EpollSet *set) noexcept;
// Marks epfd, a descriptor of set the caller holds a reference on, so that its waits go
// straight to the kernel while every member stays direct (members only become direct; an
// added one clears the mark).  One descriptor per set: a second one is never marked.
void epoll_mark_direct(EpollSet *set, int epfd) noexcept;
EpollSet *epoll_set_new() noexcept;

// The socket's state changed: its registrations follow at the next call on their sets.
void epoll_sock_changed(Sock *s) noexcept;
// The socket is being destroyed: unregister it everywhere.
void epoll_sock_gone(Sock *s) noexcept;
// A read (POLLIN) or write (POLLOUT) on the socket would block: edge-triggered waiters
// get that readiness reported again once it returns, as the kernel's edges do.
void epoll_sock_drained(Sock *s, short bits) noexcept;
// The socket stops being tracked: its registrations become the program's own again.
void epoll_sock_untrack(Sock *s) noexcept;

// epoll_ctl on a set for a tracked socket (the caller checked both).
int epoll_ctl_member(EpollSet *set, int epfd, int op, int fd, Sock *s, epoll_event *ev) noexcept;
// epoll_ctl DEL/MOD of an fd that has no member: nothing to do but the kernel's.
// epoll_wait / epoll_pwait / epoll_pwait2 on a set that has members.
int epoll_wait_set(EpollSet *set, int epfd, epoll_event *out, int max, Deadline deadline,
                   const sigset_t *mask) noexcept;
// Whether the set has members (a cheap check before the slow path).
bool epoll_has_members(EpollSet *set) noexcept;

} // namespace vipl::db
