/*
 * vipl_ext.h - extensions to VIPL 1.0 made by this library.
 *
 * The same rules as <vipl.h> apply: return codes, thread safe,
 * async-signal-unsafe, nothing inherited across fork().
 */
#ifndef VIPL_EXT_H
#define VIPL_EXT_H

#include <vipl.h>

#include <sys/socket.h> /* struct sockaddr_storage (VIP_VI_ENDPOINTS) */
#include <sys/types.h>  /* pid_t, uid_t, gid_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ new return codes */

/*
 * A blocking call (SendWait, RecvWait, CQWait, ConnectWait, ConnectRequest,
 * ConnectPeerWait) slept and a signal handler ran meanwhile.  The call gave
 * up and took nothing, even if what it waited for came during the handler:
 * a descriptor or CQ entry that completed is returned by the next Done or
 * Wait, a connection request by the next ConnectWait; an interrupted
 * ConnectRequest leaves its VI Idle, an interrupted ConnectPeerWait leaves
 * it Pending.  A handler that runs during the short spin that precedes
 * sleeping (VIPL_SPIN_US) does not end the call.
 */
#define VIP_INTERRUPTED ((VIP_RETURN)17)

/*
 * A VIPL function was called from a signal handler that interrupted a VIPL
 * call on the same thread.  Nothing was done.
 */
#define VIP_ERROR_REENTERED ((VIP_RETURN)18)

/* ------------------------------------------------------ the process model */

/*
 * fork() and exec().  Without the Shareable extension a child inherits
 * nothing: every handle of the parent is refused in the child with
 * VIP_INVALID_PARAMETER and does nothing there; the child holds none of the
 * parent's descriptors or connection memory (closed and unmapped in the fork
 * handler), so the parent's connections neither depend on the child nor end
 * when it exits.  The child may open its own NIC.  After exec() nothing of
 * VIPL survives: every descriptor is close-on-exec and mappings go with the
 * old image.
 *
 * Shareable VIs.  A VI created with VIP_VI_ATTRIBUTES.Shareable set, its
 * shareable CQs (VipCreateCQEx with VIP_CQ_SHAREABLE) and memory registered
 * with VIP_MEM_ATTRIBUTES.Shareable are shared with the children the process
 * forks afterwards: parent and children may all post sends and receives and
 * take completions, concurrently; each completion goes to exactly one caller.
 * Rules:
 *  - a shareable VI's descriptors and buffers must be in shareable regions,
 *    and its CQs must be shareable (VIP_INVALID_PARAMETER otherwise);
 *  - a shareable VI is shared with the children forked after it was
 *    connected: connecting it makes the connecting process its only holder
 *    until it forks again (other processes get VIP_INVALID_PARAMETER);
 *  - VipDestroyVi / VipDestroyCQ in one holder only drops that process's
 *    reference while other holders live; the last holder destroys (and the
 *    usual state rules apply to it).  The connection lives until the last
 *    holder destroys the VI or exits; the peer sees it end then;
 *  - a holder killed while inside the library (holding the VI's lock, half
 *    way through a post) does not wedge the others: the VI goes to the Error
 *    state with VIP_ERROR_CATASTROPHIC, which every holder sees, and the peer
 *    sees the connection end;
 *  - at most 64 processes hold an object at once; a child beyond that does
 *    not become a holder.
 *
 * Threads.  Every function may be called from any thread at any time.  The
 * library starts no thread until a Notify handler or an error callback is
 * registered; then exactly one (named "vipl-notify"), which runs those
 * handlers and blocks every signal for itself only.
 *
 * Signals.  VIPL functions are async-signal-unsafe.  A blocking call
 * returns VIP_INTERRUPTED when a signal handler ran while it slept (in its
 * wait, or in a short wait of its own such as tcp's for the rest of a frame),
 * with or without SA_RESTART, and takes nothing then: what completed
 * meanwhile goes to the next call.  VipConnectAccept is not interrupted (it
 * finishes the handshake, so both sides agree).  The tcp name service
 * returns VIP_INTERRUPTED while it waits for a DNS server.  Every VIPL
 * function returning VIP_RETURN, these extensions included, returns
 * VIP_ERROR_REENTERED at once and does nothing when called from a handler
 * that interrupted a VIPL call on the same thread.  The library installs
 * no handler, blocks no signal in the program's threads and sends none
 * (SIGURG, SIGUSR1, SIGUSR2, SIGPWR are the program's).
 */

/* VipCreateCQEx flags. */
#define VIP_CQ_SHAREABLE 0x1u

/*
 * VipCreateCQ with flags: VIP_CQ_SHAREABLE makes a CQ that shareable VIs
 * can use, shared with fork children like them.  Returns as VipCreateCQ,
 * and VIP_INVALID_PARAMETER for unknown flags.
 * Child: a shareable CQ is usable by the children forked after it was
 * created; VipDestroyCQ there drops only that child's reference.
 * Signal handler: not allowed (VIP_ERROR_REENTERED inside another call).
 * Threads: any, concurrently with VipCQDone/VipCQWait elsewhere.
 */
VIP_RETURN VipCreateCQEx(IN VIP_NIC_HANDLE NicHandle, IN VIP_ULONG EntryCount, IN VIP_ULONG Flags,
                         OUT VIP_CQ_HANDLE *CQHandle);

/*
 * Name of a return code ("VIP_SUCCESS"...), or "VIP_UNKNOWN".  Never NULL.
 * Needs no VIPL state: safe in a child, under threads, and (it only reads a
 * constant table) in a signal handler.
 */
const char *VipReturnString(VIP_RETURN Code);

/* ------------------------------------------------------ waitable descriptors */

/*
 * Returns a file descriptor that poll/select/epoll report readable when the
 * VI has a completed descriptor on either queue, or has left the Connected
 * state.  The descriptor belongs to the VI: do not close it or read it.
 *
 * Use: call Done until it returns VIP_NOT_DONE, then wait for the fd.  A
 * Done that returns VIP_NOT_DONE re-arms the fd; the fd may stay readable
 * until then (a spurious wake-up is possible, a missed one is not).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_RESOURCE.
 * Child: closed in a fork child for a private VI; for a shareable VI it is
 * inherited and keeps working (each holder may also ask for its own).
 * Signal handler: the fd may be polled from one; the call may not be made.
 * Threads: any; several threads may poll the same fd.
 */
VIP_RETURN VipGetViWaitFd(IN VIP_VI_HANDLE ViHandle, OUT int *Fd);

/* VipGetViWaitFdEx flags. */
#define VIP_WAITFD_EXPLICIT_ARM 0x1u

/*
 * VipGetViWaitFd with flags.  VIP_WAITFD_EXPLICIT_ARM: a Done that finds
 * nothing no longer arms the fd; the program calls VipArmViWaitFd before it
 * sleeps on it instead.  Arming makes the peer ring this side's doorbell at
 * its next event (a system call on each side), which a program that keeps
 * calling Done while traffic flows (spinning, or busy) does not need: with
 * the usual rule each of its messages costs that.  The mode is the VI's (all
 * holders of a shareable VI), from this call on.  Returns as VipGetViWaitFd,
 * and VIP_INVALID_PARAMETER for unknown flags.
 * Child, signal and thread rules as VipGetViWaitFd.
 */
VIP_RETURN VipGetViWaitFdEx(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Flags, OUT int *Fd);

/*
 * In the explicit mode: the wait fd becomes readable at the VI's next event
 * (a completion on either queue, the VI leaving the Connected state), or at
 * once if something is there already (a completion to take, data the
 * transport has not processed).  Call it after the last Done before
 * sleeping; nothing is lost between the two.  Once readable it stays so
 * until the next VipArmViWaitFd (a spurious wake-up is possible, a missed one
 * is not).  A completion that a Done made and returned at once is no event
 * for the fd: the caller has it (the fd still shows one the Done left).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE (the VI has
 * no wait fd).  Child, signal and thread rules as VipGetViWaitFd.
 */
VIP_RETURN VipArmViWaitFd(IN VIP_VI_HANDLE ViHandle);

/*
 * VipArmViWaitFd for some events only.  VIP_ARM_ARRIVALS: something arrives (a
 * receive completes, the peer sent); VIP_ARM_CONSUMED: the peer consumed what this
 * side sent (send completions, room); VIP_ARM_ANY both (VipArmViWaitFd).  A program
 * that waits to read arms for arrivals only: the peer taking its last message then
 * rings no doorbell (on a request-reply connection that is a wake-up, two context
 * switches, per request).  Sends that wait for room are armed for whatever the
 * program asks.  A completion already there makes the fd readable at once only if it
 * is of a kind armed for: a program armed for arrivals may leave its send completions
 * in the VI.  VIP_ARM_EDGE (with one of the others): the program watches the fd
 * edge-triggered only (EPOLLET), so the arming leaves the doorbell's count instead of
 * reading it, a system call less per wake-up; the fd may then stay readable, and the
 * next arming without VIP_ARM_EDGE drains it.  The end of the connection reaches such a
 * program as one edge: an edge arming made while the last one still stands (the
 * program woke without a doorbell, or did not sleep) looks at the peer at once (a
 * system call), so that a death its last look missed still wakes it.  Returns as
 * VipArmViWaitFd, and VIP_INVALID_PARAMETER for no event bits or unknown bits.
 */
#define VIP_ARM_ARRIVALS 0x1
#define VIP_ARM_CONSUMED 0x2
#define VIP_ARM_ANY (VIP_ARM_ARRIVALS | VIP_ARM_CONSUMED)
#define VIP_ARM_EDGE 0x4
VIP_RETURN VipArmViWaitFdEx(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Events);

/*
 * Sleeps until the VI has an event of Events (VIP_ARM_* bits: a completion of that
 * kind for a Done to take, input the transport holds), leaves the Connected state,
 * Timeout milliseconds pass (VIP_INFINITE: no limit, 0: one look), or a signal
 * handler runs.  Takes nothing: the program calls Done afterwards, as after a poll of
 * the wait fd (a spurious wake-up is possible, a missed one is not).  The call arms
 * the VI and looks a last time itself; there is no need for a Done just before.  For
 * a program that waits on this VI alone: it is the sleep that VipArmViWaitFdEx and a
 * poll of the wait fd make, minus a system call per wake-up (a lone sleeper waits
 * edge-triggered, and the doorbell is drained only when the fd is armed next).  Works
 * with or without a wait fd; in the explicit mode it arms the fd for Events, as
 * VipArmViWaitFdEx(Events) would.  Returns VIP_SUCCESS (something may be there),
 * VIP_TIMEOUT, VIP_INTERRUPTED, VIP_INVALID_PARAMETER (no or unknown Events bits, a
 * bad handle), VIP_ERROR_RESOURCE.  Child, signal and thread rules as VipRecvWait.
 */
VIP_RETURN VipWaitViEvent(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Events, IN VIP_ULONG Timeout);

/*
 * The same for a completion queue: readable when VipCQDone would return an
 * entry.  Child, signal and thread rules as VipGetViWaitFd.
 */
VIP_RETURN VipGetCQWaitFd(IN VIP_CQ_HANDLE CQHandle, OUT int *Fd);

/*
 * The same for connection requests: a descriptor that poll/select/epoll
 * report readable while a request for LocalAddr's discriminator is pending,
 * that is when VipConnectWait(NicHandle, LocalAddr, 0, ...) would return one.
 * A server loop waits for it with its other descriptors and then calls
 * VipConnectWait with Timeout 0; no thread is needed, and the library starts
 * none for it.
 *
 * The call starts serving the discriminator as VipConnectWait does: requests
 * made from then on are queued.  Repeated calls for one discriminator return
 * the same descriptor.  A spurious wake-up is possible (a connection whose
 * request is still on its way or came in part, a request that turns out
 * malformed or abandoned, on tcp one meant for another discriminator that
 * shares the port), a missed one is not: a VipConnectWait with Timeout 0 that
 * returns VIP_TIMEOUT re-arms the descriptor, which stays quiet until
 * something new arrives (the rest of a request, a new one).
 *
 * The descriptor belongs to the NIC: do not close or read it; it is valid
 * until VipCloseNic.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER (bad handle, Fd NULL, an address
 * that is not this NIC's or a discriminator too long), VIP_ERROR_RESOURCE (no
 * descriptor left, or the discriminator is served by another process or NIC,
 * as VipConnectWait), VIP_ERROR_NOT_SUPPORTED (a provider without it).
 * Child: closed in a fork child (the NIC is the parent's); the child may open
 * its own NIC once the parent gives the discriminator up.
 * Signal handler: the fd may be polled from one; the call may not be made.
 * Threads: any; several threads may poll the fd, one VipConnectWait takes
 * each request.
 */
VIP_RETURN VipGetConnWaitFd(IN VIP_NIC_HANDLE NicHandle, IN VIP_NET_ADDRESS *LocalAddr,
                            OUT int *Fd);

/* ------------------------------------------------------ connection ends */

/* VIP_VI_ENDPOINTS.Kind: which fields of the structure hold. */
#define VIP_ENDPOINTS_SOCKET 1 /* LocalSocket, RemoteSocket (tcp) */
#define VIP_ENDPOINTS_LOCAL 2  /* PeerPid, PeerUid, PeerGid: a process of this host (shm) */

/*
 * The two ends of a VI's connection as the kernel knows them, never as the
 * peer described itself in its connection request.
 */
typedef struct {
    VIP_UINT32 Kind; /* VIP_ENDPOINTS_SOCKET or VIP_ENDPOINTS_LOCAL */
    /* SOCKET: getsockname() and getpeername() of the VI's TCP connection. */
    struct sockaddr_storage LocalSocket;
    struct sockaddr_storage RemoteSocket;
    /* LOCAL: the peer process's credentials when the connection was made
     * (SO_PEERCRED): for the requesting side the process that served the
     * discriminator, for the accepting side the one that asked.  The peer of
     * a shareable VI may have forked holders since; they are not listed.
     * -1 for SOCKET. */
    pid_t PeerPid;
    uid_t PeerUid;
    gid_t PeerGid;
    /* This NIC's host address (as in VIP_NET_ADDRESS); for LOCAL the peer's
     * host too. */
    VIP_UINT16 HostAddressLen;
    VIP_UINT8 HostAddress[32];
    /* VIP_TRUE: the peer's RDMA reads of this side's memory complete with no
     * call of this side (shm's cross-memory attach), so memory it may read can
     * be offered and left alone.  VIP_FALSE: this side's library serves them
     * while it is called (tcp; shm without cross-memory access). */
    VIP_BOOLEAN PeerReadsAlone;
} VIP_VI_ENDPOINTS;

/*
 * Fills *Endpoints for a VI that holds a connection (Connected, or in the
 * Error state before it is disconnected, while the provider still has the
 * connection).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER (bad handle, Endpoints NULL),
 * VIP_INVALID_STATE (no connection: Idle, Pending, or torn down),
 * VIP_ERROR_NOT_SUPPORTED (a provider without it).
 * Child: as every VI call (a shareable VI's holders may ask; the answer is
 * the same in each).  Signal handler: not allowed.  Threads: any.
 */
VIP_RETURN VipQueryViEndpoints(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_ENDPOINTS *Endpoints);

/* ---------------------------------------------------------------- counters */

typedef struct {
    VIP_UINT64 SendsPosted;
    VIP_UINT64 RecvsCompleted;
    VIP_UINT64 BytesSent;
    VIP_UINT64 BytesReceived;
    VIP_UINT64 CopySends;     /* COPY-SEND-COPY path */
    VIP_UINT64 GetSends;      /* SEND-GET path (single copy by the receiver) */
    VIP_UINT64 PipelineSends; /* copy path used because cross-memory attach is refused */
    VIP_UINT64 DoorbellsRung; /* system calls made to wake the peer or a local waiter */
    VIP_UINT64 SpinWins;      /* waits satisfied while spinning (no sleep) */
    VIP_UINT64 Sleeps;        /* waits that slept in the kernel */
    VIP_UINT64 InlineSends;   /* VipPostSendInline calls that sent */
} VIP_VI_COUNTERS;

/*
 * Counters of a VI since it was created (all holders of a shareable VI add
 * to the same counters).  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER.
 * Child: as every VI call.  Signal handler: not allowed.  Threads: any.
 */
VIP_RETURN VipQueryViCounters(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_COUNTERS *Counters);

/* ---------------------------------------------------------- holders */

/*
 * How many processes hold the VI now, the caller included: 1 for a private
 * VI, and for a shareable one 1 plus every other live holder (a child forked
 * a moment ago counts at once; holders that exited, were killed or called
 * exec() do not, and their places are freed on the way).  A program that
 * must know whether destroying its VI would end the connection asks this.
 * The answer may change at once when another holder forks, exits or
 * destroys its VI.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER.
 * Cost: a few system calls per other holder (each one's liveness is checked).
 * Child: as every VI call.  Signal handler: not allowed.  Threads: any.
 */
VIP_RETURN VipQueryViHolders(IN VIP_VI_HANDLE ViHandle, OUT VIP_ULONG *Holders);

/* ---------------------------------------------------------- spinning */

/*
 * The adaptive spin policy of the library's own waits (VipSendWait,
 * VipRecvWait), for programs that wait on their own (a loop over Done calls
 * and the wait fd).  Each VI has one policy state per process, which its
 * waits and these calls share:
 *  - the budget is BaseNanoseconds (the waits use VIPL_SPIN_US), halved
 *    for each spin in a row that found nothing, down to nothing after 10;
 *  - after 10 misses one wait in 32 at random probes with four times the
 *    base, so that two peers that both stopped spinning find their way back;
 *    each probe in a row that misses halves that rate, down to one wait in
 *    1024 (a peer that never answers within a probe costs almost nothing);
 *    a win restores the full budget and the rate;
 *  - no budget at all when the transport cannot spin, or when the peer last
 *    waited on the caller's CPU (this call publishes the caller's CPU to the
 *    peer as well, where the transport exchanges them: shm does, tcp not).
 * A spinner looks again and again (a Done, or its own look at the VI),
 * yields the CPU every YieldEvery looks when that is not 0 (the peer's CPU
 * is unknown: it may share ours), stops once Nanoseconds have passed, then
 * reports with VipViSpinOutcome: Won when the answer came while spinning,
 * VIP_FALSE when it ran out, or when the answer came only after a yield that
 * let another task run (a peer on this CPU answers a sleeper as well).
 * A waiter that handed the CPU to its peer (Nanoseconds 0, PeerCpuKnown) reports
 * whether a hand-off brought the answer: hand-offs that keep bringing nothing (the
 * peer sleeps, or the scheduler keeps the CPU with the yielder, as it does for a peer
 * in another session's autogroup) are no longer offered (PeerCpuKnown false), but
 * for a probe now and then.  A waiter that neither spun nor handed off reports nothing.
 */
typedef struct {
    /* How long to spin now; 0: sleep at once.  0 with PeerCpuKnown set: the peer
     * waits on this CPU (a waiter may hand it the CPU with sched_yield()). */
    VIP_UINT64 Nanoseconds;
    VIP_ULONG YieldEvery;     /* looks between two sched_yield(); 0: never */
    VIP_BOOLEAN PeerCpuKnown; /* the transport told where the peer waits */
} VIP_SPIN_BUDGET;

/*
 * The spin the policy allows now, with BaseNanoseconds as the full budget
 * (0: never spin).  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER.
 * Child: as every VI call (a holder of a shareable VI has its own state).
 * Signal handler: not allowed.  Threads: any; threads of one process share
 * the VI's state.
 */
VIP_RETURN VipViSpinBudget(IN VIP_VI_HANDLE ViHandle, IN VIP_UINT64 BaseNanoseconds,
                           OUT VIP_SPIN_BUDGET *Budget);

/*
 * How a spin planned with VipViSpinBudget ended (see above).  Returns
 * VIP_SUCCESS, VIP_INVALID_PARAMETER.  Child, signal and thread rules as
 * VipViSpinBudget.
 */
VIP_RETURN VipViSpinOutcome(IN VIP_VI_HANDLE ViHandle, IN VIP_BOOLEAN Won);

/*
 * The CPU the peer last waited on over this connection (its last spin or sleep), for
 * a caller whose choice depends on whether the two ends share a CPU: *PeerCpu is -1
 * when the transport does not tell (tcp) or the peer has not waited yet.  Publishes
 * the caller's present CPU to the peer in turn, as VipViSpinBudget does.  Returns
 * VIP_SUCCESS, VIP_INVALID_PARAMETER.  Child, signal and thread rules as
 * VipViSpinBudget.
 */
VIP_RETURN VipQueryViPeerCpu(IN VIP_VI_HANDLE ViHandle, OUT int *PeerCpu);

/* ---------------------------------------------------------- inline sends */

/*
 * An inline send copies its bytes into the transport during the call, as
 * verbs' IBV_SEND_INLINE does: the memory need not be registered, may be
 * reused as soon as the call returns, and no descriptor is posted, so none
 * completes (VipSendDone, VipSendWait and the CQ hear nothing of it).  The
 * peer receives an ordinary send into its next posted receive descriptor.
 * A small message then costs no descriptor parse, no send-queue entry and
 * no completion to take: what a request-reply protocol pays per message.
 */
typedef struct {
    const void *Data;
    VIP_UINT32 Length;
} VIP_INLINE_SEGMENT;

/* Gather list length of one inline send. */
#define VIP_MAX_INLINE_SEGMENTS 4

/*
 * *MaxBytes: the most bytes one VipPostSendInline can carry on this VI; 0
 * when its provider takes no inline sends (tcp) or it holds no connection.
 * Constant while the VI stays connected.  Returns VIP_SUCCESS,
 * VIP_INVALID_PARAMETER.  Child: as every VI call.  Signal handler: not
 * allowed.  Threads: any.
 */
VIP_RETURN VipQueryViInline(IN VIP_VI_HANDLE ViHandle, OUT VIP_UINT32 *MaxBytes);

/*
 * Sends the concatenation of Segments[0 .. SegCount) (1 to
 * VIP_MAX_INLINE_SEGMENTS, their lengths adding up to at most
 * VipQueryViInline's maximum) as one message, copied now.  Ordered with the
 * VI's other sends: it never overtakes one posted before it.  Returns
 * VIP_SUCCESS (the message is on its way; counted in SendsPosted, BytesSent
 * and InlineSends), VIP_ERROR_RESOURCE (not now, nothing sent: no room in
 * the transport, or earlier sends still wait for room; post the message
 * with VipPostSend instead, or later), VIP_INVALID_STATE (not Connected),
 * VIP_INVALID_PARAMETER (bad handle, segments or length).  A failure of the
 * connection afterwards shows as for any send: the VI enters the Error
 * state (reliable levels).  Child: as every VI call (a shareable VI's
 * holders may all send).  Signal handler: not allowed.  Threads: any.
 */
VIP_RETURN VipPostSendInline(IN VIP_VI_HANDLE ViHandle, IN const VIP_INLINE_SEGMENT *Segments,
                             IN VIP_ULONG SegCount);

/* ------------------------------------------------------- introspection */

typedef struct {
    const char *Name;    /* "shm" */
    const char *Devices; /* device names it opens, e.g. "shm0" */
    const char *Summary;
} VIP_PROVIDER_INFO;

/*
 * Number of providers built in, and each one's description (Index from 0).
 * No state: safe in a child and under threads; not in a signal handler
 * (VipProviderInfo: VIP_ERROR_REENTERED inside another call).
 */
VIP_ULONG VipProviderCount(void);
VIP_RETURN VipProviderInfo(IN VIP_ULONG Index, OUT VIP_PROVIDER_INFO *Info);

typedef struct {
    const char *Name;         /* key, e.g. "SPIN_US"; environment variable VIPL_<Name> */
    const char *DefaultValue; /* as text */
    const char *Value;        /* in effect in this process */
    const char *Help;
} VIP_CONFIG_INFO;

/*
 * Configuration keys, read once from VIPL_* environment variables when the
 * library is first used.  The strings live as long as the process.  A fork
 * child keeps its parent's configuration (change the environment before
 * exec, not after fork).  Threads: any.  Signal handler: not allowed
 * (VipConfigInfo: VIP_ERROR_REENTERED inside another call).
 */
VIP_ULONG VipConfigCount(void);
VIP_RETURN VipConfigInfo(IN VIP_ULONG Index, OUT VIP_CONFIG_INFO *Info);

/* --------------------------------------------------------------- the log */

/* Levels of the library's log lines; VIPL_LOG_LEVEL lets through those <= it. */
#define VIP_LOG_ERROR 0
#define VIP_LOG_WARNING 1
#define VIP_LOG_INFO 2
#define VIP_LOG_DEBUG 3

typedef void (*VIP_LOG_HANDLER)(VIP_PVOID Context, VIP_ULONG Level, const VIP_CHAR *Text);

/*
 * Watches the library's log, as a test harness or an embedding program's own
 * logger does.  Each line VIPL_LOG_LEVEL lets through still goes to stderr;
 * then Handler gets its level and its text (without the "vipl[pid]: level: "
 * prefix or the newline).  Handler runs in the thread that logs: a thread in
 * any call, under library locks, or the notification thread.  It must not
 * call the library and should return at once.  NULL stops watching.  Set it
 * while no other thread uses the library; a fork child keeps it.
 * Returns VIP_SUCCESS.
 */
VIP_RETURN VipLogHandler(IN VIP_LOG_HANDLER Handler, IN VIP_PVOID Context);

#ifdef __cplusplus
}
#endif

#endif /* VIPL_EXT_H */
