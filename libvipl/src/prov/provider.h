// The provider interface: what a transport implements under the generic core.
//
// A provider fills one ProviderOps row with its NIC and VI ops tables.  Each
// table starts with its own size; an operation a provider lacks points at a
// shared "not supported" stub (prov/enosys.h), never at NULL.
//
// Locking: data-path ops (post_send, post_recv, progress) run with vi->lock
// held.  Connection ops run without it; the core serialises them per VI with
// the VI state.  Providers report completions and errors with the core calls
// of core/vi.h.
#pragma once

#include "core/config.h"
#include "core/objects.h"
#include "core/posted.h"

#include <poll.h>
#include <sys/types.h>

namespace vipl {

// kCapSpin: `pending` is cheap enough to spin on before sleeping.  kCapEdge:
// every event makes a wait descriptor newly ready, and progress leaves
// nothing behind that a new event would have to announce, so a lone sleeper
// may wait edge-triggered.  Without it the core polls level-triggered.
// kCapSpinByProgress: `pending` costs as much as `progress` finding nothing
// (a system call each), so a spinner calls progress straight away: one call
// instead of two when something is there.
enum WaitCaps : unsigned { kCapSpin = 1, kCapEdge = 2, kCapSpinByProgress = 4 };

struct NicOps {
    size_t size;
    // Fills nic->attrs (Name, addresses, limits) and nic->prov.
    VIP_RETURN (*open)(Nic *nic, const char *device);
    void (*close)(Nic *nic);
    VIP_RETURN (*ns_by_name)(Nic *nic, const char *name, VIP_NET_ADDRESS *out, VIP_ULONG index);
    VIP_RETURN (*ns_by_addr)(Nic *nic, const VIP_NET_ADDRESS *addr, char *name, VIP_ULONG *len);
    VIP_RETURN (*autodiscovery)(Nic *nic, VIP_AUTODISCOVERY_LIST *list);
    // Server side.  connect_wait blocks until deadline (ns, kNoDeadline) and
    // returns VIP_INTERRUPTED if a signal handler ran while it slept.
    VIP_RETURN(*connect_wait)
    (Nic *nic, const VIP_NET_ADDRESS *local, uint64_t deadline, ConnReq *req,
     VIP_NET_ADDRESS *remote, VIP_VI_ATTRIBUTES *remote_attrs);
    // A descriptor readable while a request for local's discriminator is
    // pending (VipGetConnWaitFd); starts serving it as connect_wait does.
    // Owned by the NIC: the same one for every call, closed with the NIC.
    // No thread may be started for it.
    VIP_RETURN (*connect_wait_fd)(Nic *nic, const VIP_NET_ADDRESS *local, int *fd);
    VIP_RETURN (*connect_accept)(ConnReq *req, Vi *vi);
    VIP_RETURN (*connect_reject)(ConnReq *req);
    void (*conn_free)(ConnReq *req);
};

struct ViOps {
    size_t size;
    VIP_RETURN (*create)(Vi *vi);
    void (*destroy)(Vi *vi);
    VIP_RETURN(*connect_request)
    (Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote, uint64_t deadline,
     VIP_VI_ATTRIBUTES *remote_attrs);
    VIP_RETURN(*peer_request)
    (Vi *vi, const VIP_NET_ADDRESS *local, const VIP_NET_ADDRESS *remote, uint64_t deadline);
    // One step of a peer connection; VIP_NOT_DONE until it ends.  Fills
    // fds (at most 4) with what to poll for the next step.
    VIP_RETURN(*peer_progress)
    (Vi *vi, VIP_VI_ATTRIBUTES *remote_attrs, struct pollfd *fds, int *nfds, uint64_t *deadline);
    // The ends of the connection as the kernel reports them (vi->lock held);
    // VIP_INVALID_STATE without a transport.
    VIP_RETURN (*endpoints)(Vi *vi, VIP_VI_ENDPOINTS *out);
    // Drops the transport; the peer's VI sees VIP_ERROR_CONN_LOST.
    void (*disconnect)(Vi *vi);
    // A holder of a shareable VI leaves: close this process's copies of the
    // transport's descriptors and mappings, touch nothing shared.
    void (*leave)(Vi *vi);
    // The transport's shared state may be half-changed (a holder died in the
    // middle): tell the peer the connection is over and stop using it.
    void (*abandon)(Vi *vi);

    VIP_RETURN (*post_send)(Vi *vi, WqEntry *e, const PostedDesc &d);
    void (*post_recv)(Vi *vi, WqEntry *e);
    // Inline sends (VipPostSendInline; both may be null: none).  inline_max: the most
    // bytes one may carry while the connection lasts (0: none now).  post_inline copies
    // the bytes of segs (len in all, at most inline_max) into the transport now, as a
    // send the peer receives like any other, with no send-queue entry; VIP_ERROR_RESOURCE
    // when it cannot at once (no room, or a posted send still waits for room: the
    // inline one must not overtake it).  Called with the VI Connected.
    uint32_t (*inline_max)(Vi *vi);
    VIP_RETURN (*post_inline)(Vi *vi, const Segment *segs, uint32_t nseg, uint64_t len);
    // Moves data and completes entries on both queues.
    void (*progress)(Vi *vi);
    // Lock-free hint for spinning: could progress find something new?
    bool (*pending)(Vi *vi);
    // What a program's wait fd does not show by itself when it is armed: `pending`,
    // less what the transport's descriptors (watched level-triggered by that fd) show.
    // tcp: input taken from the socket and not handled yet, with no system call.
    bool (*held)(Vi *vi);
    // Asks the peer to write vi->efd at its next event of the kinds in `what`
    // (kWakeRecv: something arrives; kWakeSend: the peer consumed, so sends
    // may complete or proceed); disarm withdraws that when nobody sleeps any
    // more (saves the peer a useless system call).
    void (*arm)(Vi *vi, unsigned what);
    void (*disarm)(Vi *vi);
    // Whether the last arming is still pending (the peer has not rung since).
    bool (*armed)(Vi *vi);
    // Descriptors to poll besides vi->efd while sleeping, with the events
    // that matter (POLLIN: something to progress; POLLRDHUP alone: the peer
    // hung up).  The notification thread watches the POLLRDHUP ones for
    // hang-ups only.  The set may change when the connection does; a
    // provider calls vi_transport_closing before closing one of them.
    int (*wait_fds)(Vi *vi, struct pollfd *fds, int max);
    // What a thread about to sleep polls besides vi->efd, for this sleep
    // only (the events may differ from one sleep to the next).
    int (*sleep_fds)(Vi *vi, struct pollfd *fds, int max);
    // One of those descriptors woke a sleeper: look at the peer now rather
    // than at the next periodic check.
    void (*check_peer)(Vi *vi);
    // Publishes the CPU this side waits on; returns the CPU the peer last
    // waited on, or -1.  Spinning is pointless when both are the same.
    int (*exchange_cpu)(Vi *vi, int my_cpu);
    // Whether the peer is known to be at work on this connection (it has not armed
    // its end to be woken): an answer or room may come soon, spinning pays.
    // Where sleep cannot be seen (tcp), a guess (it owes an answer); false when the
    // transport cannot tell at all.
    bool (*peer_busy)(Vi *vi);
    // The caller found nothing to take and will return empty-handed or
    // sleep: push what was held back to ride on later traffic
    // (acknowledgements), so that the peer is not kept waiting.
    void (*idle)(Vi *vi);
    // Releases a per-process reference the provider recorded with
    // vi_hold_aux (when this process drops its copies of the transport).
    void (*drop_aux)(Vi *vi, void *aux);
    // Sleeping inside the transport's own read (optional, may be null): a
    // lone sleeper on a private VI with no CQ, notify or wait fd blocks in
    // recv() on `fd` into `buf` rather than poll, then reads: one system call
    // less per message, as a socket program has.  direct_begin (lock held)
    // fills *d and returns true when the transport can take such a sleeper;
    // the sleeper then calls recv(d->fd, d->buf, d->len, 0) without the lock
    // (it returns EAGAIN after d->slice_ns at most), stores 2 in *d->state,
    // takes the lock and calls direct_end with recv's result.  Meanwhile the
    // transport reads nothing itself; to tear down it shuts the socket for
    // reading (which ends the recv) and waits until *state is no longer 1.
    struct DirectSleep {
        int fd;
        void *buf;
        size_t len;
        uint64_t slice_ns;
        int *state;
    };
    bool (*direct_begin)(Vi *vi, DirectSleep *d);
    void (*direct_end)(Vi *vi, const DirectSleep &d, ssize_t n, int err);
    // WaitCaps: how the core may wait on this transport.
    unsigned wait_caps;
};

struct ProviderOps {
    size_t size;
    const char *name;
    // Device names it opens on this host, separated by spaces (made once).
    const char *(*devices)();
    const char *summary;
    bool (*matches)(const char *device);
    const NicOps *nic;
    const ViOps *vi;
    // Its configuration keys, under its prefix (listed after the core's).
    ConfigTable &(*config)();
};

// Built-in providers, in the order vipl-info lists them.
size_t provider_count();
const ProviderOps *provider_at(size_t index);
const ProviderOps *provider_for(const char *device);

} // namespace vipl
