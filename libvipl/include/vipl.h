/*
 * vipl.h - the VI Provider Library, version 1.0 API.
 *
 * Names, types, return codes and the descriptor layout follow the VI
 * Architecture Developer's Guide (VIPL 1.0), so programs written for that
 * header compile unchanged.  Extensions (wait descriptors, configuration,
 * new return codes) live in <vipl_ext.h>.
 *
 * Rules that apply to every function below:
 *  - Errors are return codes; nothing is thrown and errno is left alone.
 *    Output parameters are written only when the call succeeds (or, for
 *    Done/Wait, when a descriptor is returned).
 *  - Threads: every function is safe to call from any thread at any time.
 *    Done/Wait/CQDone/CQWait called from several threads on the same queue
 *    hand each completed descriptor to exactly one caller.
 *  - Signals: every function is async-signal-UNSAFE.  Do not call VIPL from
 *    a signal handler.  A call made from a handler that interrupted a VIPL
 *    call on the same thread returns VIP_ERROR_REENTERED at once and does
 *    nothing (see <vipl_ext.h>) instead of deadlocking.  The blocking calls
 *    (VipSendWait, VipRecvWait, VipCQWait, VipConnectWait, VipConnectRequest,
 *    VipConnectPeerWait) return VIP_INTERRUPTED when a signal handler ran
 *    while they slept, whatever SA_RESTART says, even if what they waited
 *    for came meanwhile: they then take nothing, and the next call returns
 *    it (nothing completed is lost).  A handler that runs during the short
 *    spin before sleeping does not end a call.  VipConnectAccept is not
 *    interrupted: it waits (at most CONNECT_ACK_MS) for the client to finish
 *    the handshake, so that both sides agree on the connection.  The name
 *    service is interrupted too while it waits for a DNS server (tcp).
 *    The library installs no signal handler and blocks no signal in the
 *    program's threads.
 *  - fork(): a child inherits no VIPL resource.  Handles created by the
 *    parent are invalid in the child (VIP_INVALID_PARAMETER).  After exec()
 *    nothing of VIPL survives (every descriptor is close-on-exec).
 *  - Timeouts are in milliseconds; VIP_INFINITE waits forever; 0 polls once.
 *  - Descriptors and the data they point at are written in host byte order.
 */
#ifndef VIPL_H
#define VIPL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef IN
#define IN
#endif
#ifndef OUT
#define OUT
#endif

/* ---------------------------------------------------------------- types */

typedef void *VIP_PVOID;
typedef int VIP_BOOLEAN;
typedef char VIP_CHAR;
typedef unsigned char VIP_UCHAR;
typedef unsigned short VIP_USHORT;
typedef unsigned long VIP_ULONG;
typedef uint64_t VIP_UINT64;
typedef uint32_t VIP_UINT32;
typedef uint16_t VIP_UINT16;
typedef uint8_t VIP_UINT8;

typedef VIP_PVOID VIP_QOS; /* provider specific; no provider defines any QoS */

#define VIP_TRUE (1)
#define VIP_FALSE (0)

/* Timeout value meaning "no timeout". */
#define VIP_INFINITE ((VIP_ULONG)0xFFFFFFFFUL)

/* Opaque handles.  Garbage values are detected and refused. */
typedef VIP_PVOID VIP_NIC_HANDLE;
typedef VIP_PVOID VIP_VI_HANDLE;
typedef VIP_PVOID VIP_PROTECTION_HANDLE;
typedef VIP_PVOID VIP_CONN_HANDLE;
typedef VIP_PVOID VIP_CQ_HANDLE;

/* Handle of a registered memory region, as carried in descriptors. */
typedef VIP_UINT32 VIP_MEM_HANDLE;

/*
 * A VI network address: a host address of HostAddressLen bytes followed
 * directly by an endpoint discriminator of DiscriminatorLen bytes.  Allocate
 * sizeof(VIP_NET_ADDRESS) + HostAddressLen + DiscriminatorLen bytes.
 */
typedef struct {
    VIP_UINT16 HostAddressLen;
    VIP_UINT16 DiscriminatorLen;
    VIP_UINT8 HostAddress[1];
} VIP_NET_ADDRESS;

typedef VIP_USHORT VIP_RELIABILITY_LEVEL;
#define VIP_SERVICE_UNRELIABLE 0x01
#define VIP_SERVICE_RELIABLE_DELIVERY 0x02
#define VIP_SERVICE_RELIABLE_RECEPTION 0x04

/* What VipQueryNic reports.  Every limit is enforced. */
typedef struct {
    VIP_CHAR Name[64];
    VIP_ULONG HardwareVersion;
    VIP_ULONG ProviderVersion;
    VIP_UINT16 NicAddressLen;
    const VIP_UINT8 *LocalNicAddress; /* host address of this NIC, NicAddressLen bytes */
    VIP_BOOLEAN ThreadSafe;
    VIP_UINT16 MaxDiscriminatorLen;
    VIP_ULONG MaxRegisterBytes;
    VIP_ULONG MaxRegisterRegions;
    VIP_ULONG MaxRegisterBlockBytes;
    VIP_ULONG MaxVI;
    VIP_ULONG MaxDescriptorsPerQueue;
    VIP_ULONG MaxSegmentsPerDesc;
    VIP_ULONG MaxCQ;
    VIP_ULONG MaxCQEntries;
    VIP_ULONG MaxTransferSize;
    VIP_ULONG NativeMTU;
    VIP_ULONG MaxPtags;
    VIP_RELIABILITY_LEVEL ReliabilityLevelSupport;
    VIP_RELIABILITY_LEVEL RDMAReadSupport;
} VIP_NIC_ATTRIBUTES;

/* ---------------------------------------------------------- descriptors */

/* Descriptors must start on this boundary. */
#define VIP_DESCRIPTOR_ALIGNMENT 64

typedef union {
    VIP_UINT64 AddressBits;
    VIP_PVOID Address;
} VIP_PVOID64;

/* Control segment: 32 bytes. */
typedef struct {
    VIP_PVOID64 Next;          /* free for the program; the library never follows it */
    VIP_MEM_HANDLE NextHandle; /* free for the program */
    VIP_UINT16 SegCount;       /* number of segments after the control segment */
    VIP_UINT16 Control;        /* VIP_CONTROL_* */
    VIP_UINT32 Reserved;
    VIP_UINT32 ImmediateData; /* sent with VIP_CONTROL_IMMEDIATE; received data lands here */
    VIP_UINT32 Length;        /* send: total bytes; receive: set to the bytes received */
    VIP_UINT32 Status;        /* VIP_STATUS_*; written by the library on completion */
} VIP_CONTROL_SEGMENT;

/* Remote side of an RDMA operation: 16 bytes, first segment of RDMA descriptors. */
typedef struct {
    VIP_PVOID64 Data;
    VIP_MEM_HANDLE Handle;
    VIP_UINT32 Reserved;
} VIP_ADDRESS_SEGMENT;

/* A local buffer: 16 bytes. */
typedef struct {
    VIP_PVOID64 Data;
    VIP_MEM_HANDLE Handle;
    VIP_UINT32 Length;
} VIP_DATA_SEGMENT;

typedef union {
    VIP_ADDRESS_SEGMENT Remote;
    VIP_DATA_SEGMENT Local;
} VIP_DESCRIPTOR_SEGMENT;

/*
 * A descriptor: the control segment and its segments.  When SegCount > 2
 * further VIP_DESCRIPTOR_SEGMENTs follow DS[1] in memory.  Send and receive
 * descriptors carry SegCount data segments; RDMA descriptors carry one
 * address segment (the remote buffer) followed by SegCount-1 data segments.
 */
typedef struct _VIP_DESCRIPTOR {
    VIP_CONTROL_SEGMENT CS;
    VIP_DESCRIPTOR_SEGMENT DS[2];
} VIP_DESCRIPTOR;

/* Control field. */
#define VIP_CONTROL_OP_SENDRECV 0x0000
#define VIP_CONTROL_OP_RDMAWRITE 0x0001
#define VIP_CONTROL_OP_RDMAREAD 0x0002
#define VIP_CONTROL_OP_RESERVED 0x0003
#define VIP_CONTROL_OP_MASK 0x0003
#define VIP_CONTROL_IMMEDIATE 0x0004
#define VIP_CONTROL_QFENCE 0x0008
#define VIP_CONTROL_RESERVED 0xFFF0

/* Status field. */
#define VIP_STATUS_DONE 0x00000001
#define VIP_STATUS_FORMAT_ERROR 0x00000002
#define VIP_STATUS_PROTECTION_ERROR 0x00000004
#define VIP_STATUS_LENGTH_ERROR 0x00000008
#define VIP_STATUS_PARTIAL_ERROR 0x00000010
#define VIP_STATUS_DESC_FLUSHED_ERROR 0x00000020
#define VIP_STATUS_TRANSPORT_ERROR 0x00000040
#define VIP_STATUS_RDMA_PROT_ERROR 0x00000080
#define VIP_STATUS_REMOTE_DESC_ERROR 0x00000100
#define VIP_STATUS_ERROR_MASK 0x000001FE

#define VIP_STATUS_OP_SEND 0x00000000
#define VIP_STATUS_OP_RECEIVE 0x00010000
#define VIP_STATUS_OP_RDMA_WRITE 0x00020000
#define VIP_STATUS_OP_REMOTE_RDMA_WRITE 0x00030000
#define VIP_STATUS_OP_RDMA_READ 0x00040000
#define VIP_STATUS_OP_MASK 0x00070000
#define VIP_STATUS_IMMEDIATE 0x00080000
#define VIP_STATUS_RESERVED 0xFFF0FE00

/* ---------------------------------------------------------- VIs, memory */

typedef enum {
    VIP_STATE_IDLE,
    VIP_STATE_CONNECTED,
    VIP_STATE_CONNECT_PENDING,
    VIP_STATE_ERROR
} VIP_VI_STATE;

typedef struct {
    VIP_RELIABILITY_LEVEL ReliabilityLevel; /* exactly one VIP_SERVICE_* bit */
    VIP_ULONG MaxTransferSize;              /* largest descriptor, <= NIC MaxTransferSize */
    VIP_QOS QoS;                            /* must be NULL */
    VIP_PROTECTION_HANDLE Ptag;
    VIP_BOOLEAN EnableRdmaWrite; /* remote RDMA writes may target this VI */
    VIP_BOOLEAN EnableRdmaRead;  /* remote RDMA reads may target this VI */
    /*
     * Extension (zero keeps VIPL 1.0 behaviour): the VI is shared with the
     * children this process forks after the VI is created (or connected);
     * see <vipl_ext.h>.  A program written for VIPL 1.0 that fills the
     * structure field by field must set it too (or zero the structure).
     */
    VIP_BOOLEAN Shareable;
} VIP_VI_ATTRIBUTES;

typedef struct _VIP_MEM_ATTRIBUTES {
    VIP_PROTECTION_HANDLE Ptag;
    VIP_BOOLEAN EnableRdmaWrite; /* remote RDMA writes may land in this region */
    VIP_BOOLEAN EnableRdmaRead;  /* remote RDMA reads may read this region */
    /*
     * Extension (zero keeps VIPL 1.0 behaviour): the region may hold the
     * descriptors and buffers of shareable VIs.  It must be memory shared
     * with fork children (MAP_SHARED, memfd, shm), else VipRegisterMem
     * returns VIP_INVALID_PARAMETER.
     */
    VIP_BOOLEAN Shareable;
} VIP_MEM_ATTRIBUTES;

/* ------------------------------------------------------ asynchronous errors */

typedef enum _VIP_ERROR_CODE {
    VIP_ERROR_POST_DESC,
    VIP_ERROR_CONN_LOST,
    VIP_ERROR_RECVQ_EMPTY,
    VIP_ERROR_VI_OVERRUN,
    VIP_ERROR_RDMAW_PROT,
    VIP_ERROR_RDMAW_DATA,
    VIP_ERROR_RDMAW_ABORT,
    VIP_ERROR_RDMAR_PROT,
    VIP_ERROR_COMP_PROT,
    VIP_ERROR_RDMA_TRANSPORT,
    VIP_ERROR_CATASTROPHIC
} VIP_ERROR_CODE;

typedef enum _VIP_RESOURCE_CODE {
    VIP_RESOURCE_NIC,
    VIP_RESOURCE_VI,
    VIP_RESOURCE_CQ,
    VIP_RESOURCE_DESCRIPTOR
} VIP_RESOURCE_CODE;

typedef struct _VIP_ERROR_DESCRIPTOR {
    VIP_NIC_HANDLE NicHandle;
    VIP_VI_HANDLE ViHandle;
    VIP_CQ_HANDLE CQHandle;
    VIP_DESCRIPTOR *DescriptorPtr;
    VIP_ULONG OpCode; /* VIP_CONTROL_OP_* of the operation involved, when there is one */
    VIP_RESOURCE_CODE ResourceCode;
    VIP_ERROR_CODE ErrorCode;
} VIP_ERROR_DESCRIPTOR;

/* ---------------------------------------------------------- return codes */

typedef enum {
    VIP_SUCCESS,                   /* 0 */
    VIP_NOT_DONE,                  /* 1: nothing completed yet */
    VIP_INVALID_PARAMETER,         /* 2: bad handle, pointer or value */
    VIP_ERROR_RESOURCE,            /* 3: out of memory, descriptors, file descriptors... */
    VIP_TIMEOUT,                   /* 4 */
    VIP_REJECT,                    /* 5: the server rejected the connection */
    VIP_INVALID_RELIABILITY_LEVEL, /* 6 */
    VIP_INVALID_MTU,               /* 7: MaxTransferSize out of range or mismatched */
    VIP_INVALID_QOS,               /* 8 */
    VIP_INVALID_PTAG,              /* 9 */
    VIP_INVALID_RDMAREAD,          /* 10 */
    VIP_DESCRIPTOR_ERROR,          /* 11: the descriptor has an error status */
    VIP_INVALID_STATE,             /* 12: the object is in the wrong state for the call */
    VIP_ERROR_NAMESERVICE,         /* 13 */
    VIP_NO_MATCH,                  /* 14: nobody waits on that discriminator */
    VIP_NOT_REACHABLE,             /* 15: the host cannot be reached by this NIC */
    VIP_ERROR_NOT_SUPPORTED        /* 16 */
} VIP_RETURN;

/* VipQuerySystemManagementInfo InfoType. */
#define VIP_SMI_AUTODISCOVERY ((VIP_ULONG)1)

/*
 * Auto-discovery result.  The caller sets NumAdAddrs to the number of
 * entries of ADAddrArray, each pointing at a VIP_NET_ADDRESS with room for
 * NicAddressLen host bytes; the call fills them and sets NumAdAddrs.
 */
typedef struct {
    VIP_ULONG NumberOfHops;
    VIP_NET_ADDRESS **ADAddrArray;
    VIP_ULONG NumAdAddrs;
} VIP_AUTODISCOVERY_LIST;

/* ===================================================================== NIC */

/*
 * Opens a NIC.  "shm0" (or "shm") is the same-host shared-memory provider;
 * other names are listed by vipl-info.  Every call returns a new,
 * independent instance.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER (NULL argument, unknown
 * device), VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipOpenNic(IN const VIP_CHAR *DeviceName, OUT VIP_NIC_HANDLE *NicHandle);

/*
 * Closes a NIC, destroying whatever the program left on it (VIs are
 * disconnected, memory deregistered, CQs destroyed).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER.
 */
VIP_RETURN VipCloseNic(IN VIP_NIC_HANDLE NicHandle);

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipQueryNic(IN VIP_NIC_HANDLE NicHandle, OUT VIP_NIC_ATTRIBUTES *Attributes);

/* ===================================================== protection tags */

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_RESOURCE (MaxPtags reached). */
VIP_RETURN VipCreatePtag(IN VIP_NIC_HANDLE NicHandle, OUT VIP_PROTECTION_HANDLE *Ptag);

/*
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE (a VI or a
 * memory region still uses the tag).
 */
VIP_RETURN VipDestroyPtag(IN VIP_NIC_HANDLE NicHandle, IN VIP_PROTECTION_HANDLE Ptag);

/* ================================================================= memory */

/*
 * Registers [VirtualAddress, VirtualAddress+Length) for use in descriptors.
 * The range must be mapped.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER
 * (NULL, zero length, unmapped range), VIP_INVALID_PTAG, VIP_ERROR_RESOURCE
 * (MaxRegisterRegions, MaxRegisterBytes or MaxRegisterBlockBytes exceeded).
 */
VIP_RETURN VipRegisterMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress,
                          IN VIP_ULONG Length, IN VIP_MEM_ATTRIBUTES *MemAttribs,
                          OUT VIP_MEM_HANDLE *MemHandle);

/*
 * Deregisters a region; VirtualAddress must be the registered start.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE (a posted
 * descriptor still lies in or points into the region).
 */
VIP_RETURN VipDeregisterMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress,
                            IN VIP_MEM_HANDLE MemHandle);

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipQueryMem(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress,
                       IN VIP_MEM_HANDLE MemHandle, OUT VIP_MEM_ATTRIBUTES *MemAttribs);

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_PTAG. */
VIP_RETURN VipSetMemAttributes(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID VirtualAddress,
                               IN VIP_MEM_HANDLE MemHandle, IN VIP_MEM_ATTRIBUTES *MemAttribs);

/* ==================================================================== VIs */

/*
 * Creates a VI in the Idle state.  Either CQ handle may be NULL; a queue
 * attached to a CQ reports its completions there as well.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_RELIABILITY_LEVEL,
 * VIP_INVALID_MTU, VIP_INVALID_QOS, VIP_INVALID_PTAG, VIP_INVALID_RDMAREAD
 * (RDMA read on an unreliable VI), VIP_ERROR_RESOURCE (MaxVI reached).
 */
VIP_RETURN VipCreateVi(IN VIP_NIC_HANDLE NicHandle, IN VIP_VI_ATTRIBUTES *ViAttribs,
                       IN VIP_CQ_HANDLE SendCQHandle, IN VIP_CQ_HANDLE RecvCQHandle,
                       OUT VIP_VI_HANDLE *ViHandle);

/*
 * Destroys an Idle VI whose queues are empty (completed descriptors must be
 * taken with Done first).  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER,
 * VIP_INVALID_STATE.
 */
VIP_RETURN VipDestroyVi(IN VIP_VI_HANDLE ViHandle);

/* Any OUT pointer may be NULL.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipQueryVi(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_STATE *State,
                      OUT VIP_VI_ATTRIBUTES *ViAttribs, OUT VIP_BOOLEAN *SendQueueEmpty,
                      OUT VIP_BOOLEAN *RecvQueueEmpty);

/*
 * Changes the attributes of an Idle VI; the same checks as VipCreateVi.
 * Returns those codes and VIP_INVALID_STATE when the VI is not Idle.
 */
VIP_RETURN VipSetViAttributes(IN VIP_VI_HANDLE ViHandle, IN VIP_VI_ATTRIBUTES *ViAttribs);

/* ============================================== client-server connections */

/*
 * Waits for a connection request addressed to LocalAddr's discriminator.
 * Requests that arrive between calls are queued.  On success RemoteAddr
 * (room for MaxDiscriminatorLen + NicAddressLen bytes), the client's VI
 * attributes and a connection handle to accept or reject are returned.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_TIMEOUT, VIP_INTERRUPTED,
 * VIP_ERROR_RESOURCE (the discriminator is served by another process).
 */
VIP_RETURN VipConnectWait(IN VIP_NIC_HANDLE NicHandle, IN VIP_NET_ADDRESS *LocalAddr,
                          IN VIP_ULONG Timeout, OUT VIP_NET_ADDRESS *RemoteAddr,
                          OUT VIP_VI_ATTRIBUTES *RemoteViAttribs, OUT VIP_CONN_HANDLE *ConnHandle);

/*
 * Accepts a request with an Idle VI, which becomes Connected.  The
 * reliability levels and MaxTransferSize of both VIs must be equal.  On a
 * mismatch the request stays pending (accept with another VI or reject it).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE,
 * VIP_INVALID_RELIABILITY_LEVEL, VIP_INVALID_MTU, VIP_INVALID_RDMAREAD,
 * VIP_TIMEOUT (the client gave up), VIP_ERROR_RESOURCE.  Waits up to
 * CONNECT_ACK_MS for the client's acknowledgement; signal handlers do not
 * end that wait.
 */
VIP_RETURN VipConnectAccept(IN VIP_CONN_HANDLE ConnHandle, IN VIP_VI_HANDLE ViHandle);

/* Rejects a request; the client gets VIP_REJECT.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipConnectReject(IN VIP_CONN_HANDLE ConnHandle);

/*
 * Connects an Idle VI to the server waiting on RemoteAddr.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE, VIP_TIMEOUT,
 * VIP_REJECT, VIP_NO_MATCH (nobody waits on the discriminator),
 * VIP_NOT_REACHABLE (the host is not reachable through this NIC),
 * VIP_INTERRUPTED (the request is abandoned and the VI stays Idle; the
 * server's VipConnectAccept of it returns VIP_TIMEOUT), VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipConnectRequest(IN VIP_VI_HANDLE ViHandle, IN VIP_NET_ADDRESS *LocalAddr,
                             IN VIP_NET_ADDRESS *RemoteAddr, IN VIP_ULONG Timeout,
                             OUT VIP_VI_ATTRIBUTES *RemoteViAttribs);

/*
 * Disconnects a VI (Connected, Pending or Error), which returns to Idle.
 * Descriptors still queued complete with VIP_STATUS_DESC_FLUSHED_ERROR; the
 * peer's VI goes to the Error state with VIP_ERROR_CONN_LOST.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE (Idle VI).
 */
VIP_RETURN VipDisconnect(IN VIP_VI_HANDLE ViHandle);

/* ================================================ peer-to-peer connections */

/*
 * Starts connecting an Idle VI to a peer that makes the mirror request
 * (its LocalAddr is our RemoteAddr).  Timeout bounds the whole attempt.
 * Returns VIP_SUCCESS (started), VIP_INVALID_PARAMETER, VIP_INVALID_STATE,
 * VIP_NOT_REACHABLE, VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipConnectPeerRequest(IN VIP_VI_HANDLE ViHandle, IN VIP_NET_ADDRESS *LocalAddr,
                                 IN VIP_NET_ADDRESS *RemoteAddr, IN VIP_ULONG Timeout);

/*
 * Polls a peer connection.  Returns VIP_SUCCESS (connected), VIP_NOT_DONE,
 * VIP_TIMEOUT, VIP_INVALID_RELIABILITY_LEVEL, VIP_INVALID_MTU,
 * VIP_INVALID_PARAMETER, VIP_INVALID_STATE (no request pending).
 */
VIP_RETURN VipConnectPeerDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_ATTRIBUTES *RemoteViAttribs);

/*
 * Blocks until VipConnectPeerDone would not return VIP_NOT_DONE; may return
 * VIP_INTERRUPTED (the VI stays Pending: call again).
 */
VIP_RETURN VipConnectPeerWait(IN VIP_VI_HANDLE ViHandle, OUT VIP_VI_ATTRIBUTES *RemoteViAttribs);

/* ============================================================= data path */

/*
 * Posts a descriptor on the send queue of a Connected VI.  MemoryHandle is
 * the handle of the region holding the descriptor.  Control selects send,
 * RDMA write or RDMA read.  No system call is made while the peer is awake.
 * Returns VIP_SUCCESS; VIP_INVALID_PARAMETER (bad handle, NULL or unaligned
 * descriptor, descriptor outside MemoryHandle's region); VIP_INVALID_STATE
 * (VI not Connected); VIP_ERROR_RESOURCE (MaxDescriptorsPerQueue reached);
 * VIP_DESCRIPTOR_ERROR (malformed descriptor: it is not queued, its Status
 * says why: FORMAT, PROTECTION or LENGTH error).
 */
VIP_RETURN VipPostSend(IN VIP_VI_HANDLE ViHandle, IN VIP_DESCRIPTOR *DescriptorPtr,
                       IN VIP_MEM_HANDLE MemoryHandle);

/*
 * Takes the first descriptor of the send queue if it has completed.
 * Returns VIP_SUCCESS, VIP_DESCRIPTOR_ERROR (it completed with an error
 * status; *DescriptorPtr is set), VIP_NOT_DONE, VIP_INVALID_PARAMETER.
 */
VIP_RETURN VipSendDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_DESCRIPTOR **DescriptorPtr);

/* Like VipSendDone, blocking up to Timeout; also VIP_TIMEOUT, VIP_INTERRUPTED. */
VIP_RETURN VipSendWait(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Timeout,
                       OUT VIP_DESCRIPTOR **DescriptorPtr);

/*
 * Registers a one-shot handler called with the next completed send
 * descriptor (taken off the queue).  Handlers run on the library's single
 * notification thread, started by the first registration; they may call
 * VIPL (to register again, for instance).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipSendNotify(IN VIP_VI_HANDLE ViHandle, IN VIP_PVOID Context,
                         IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle,
                                            VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr));

/*
 * Posts a receive descriptor (allowed in the Idle, Pending and Connected
 * states).  Returns as VipPostSend.
 */
VIP_RETURN VipPostRecv(IN VIP_VI_HANDLE ViHandle, IN VIP_DESCRIPTOR *DescriptorPtr,
                       IN VIP_MEM_HANDLE MemoryHandle);

/* As VipSendDone, for the receive queue. */
VIP_RETURN VipRecvDone(IN VIP_VI_HANDLE ViHandle, OUT VIP_DESCRIPTOR **DescriptorPtr);

/* As VipSendWait, for the receive queue. */
VIP_RETURN VipRecvWait(IN VIP_VI_HANDLE ViHandle, IN VIP_ULONG Timeout,
                       OUT VIP_DESCRIPTOR **DescriptorPtr);

/* As VipSendNotify, for the receive queue. */
VIP_RETURN VipRecvNotify(IN VIP_VI_HANDLE ViHandle, IN VIP_PVOID Context,
                         IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle,
                                            VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr));

/* ===================================================== completion queues */

/*
 * Creates a completion queue of EntryCount entries.  A completion that
 * finds the queue full waits inside the library until an entry is taken;
 * nothing is dropped.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER (0 or more
 * than MaxCQEntries), VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipCreateCQ(IN VIP_NIC_HANDLE NicHandle, IN VIP_ULONG EntryCount,
                       OUT VIP_CQ_HANDLE *CQHandle);

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_INVALID_STATE (a VI still uses it). */
VIP_RETURN VipDestroyCQ(IN VIP_CQ_HANDLE CQHandle);

/*
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER (0 or more than MaxCQEntries),
 * VIP_INVALID_STATE (fewer entries than completions now queued).
 */
VIP_RETURN VipResizeCQ(IN VIP_CQ_HANDLE CQHandle, IN VIP_ULONG EntryCount);

/*
 * Takes the oldest completion: the VI and whether it was its receive queue.
 * The descriptor itself is then taken with VipSendDone/VipRecvDone.
 * Returns VIP_SUCCESS, VIP_NOT_DONE, VIP_INVALID_PARAMETER.
 */
VIP_RETURN VipCQDone(IN VIP_CQ_HANDLE CQHandle, OUT VIP_VI_HANDLE *ViHandle,
                     OUT VIP_BOOLEAN *RecvQueue);

/* Like VipCQDone, blocking up to Timeout; also VIP_TIMEOUT, VIP_INTERRUPTED. */
VIP_RETURN VipCQWait(IN VIP_CQ_HANDLE CQHandle, IN VIP_ULONG Timeout, OUT VIP_VI_HANDLE *ViHandle,
                     OUT VIP_BOOLEAN *RecvQueue);

/* One-shot handler for the next CQ entry (taken off the CQ); runs as VipSendNotify's. */
VIP_RETURN VipCQNotify(IN VIP_CQ_HANDLE CQHandle, IN VIP_PVOID Context,
                       IN void (*Handler)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle,
                                          VIP_VI_HANDLE ViHandle, VIP_BOOLEAN RecvQueue));

/* ========================================================== name service */

/* NSInitInfo is ignored.  Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipNSInit(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID NSInitInfo);

/*
 * Resolves Name to the host part of a VI address: sets HostAddressLen and
 * HostAddress, sets DiscriminatorLen to 0; the program appends its
 * discriminator.  NameIndex selects among several addresses (0 first).
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_NAMESERVICE
 * (unknown name, or no address of that index for this NIC, or no DNS
 * server answered), VIP_INTERRUPTED (a signal handler ran while it waited
 * for a DNS server: call again).
 */
VIP_RETURN VipNSGetHostByName(IN VIP_NIC_HANDLE NicHandle, IN VIP_CHAR *Name,
                              OUT VIP_NET_ADDRESS *Address, IN VIP_ULONG NameIndex);

/*
 * Gives the host name of an address.  *NameLen is the size of Name in
 * bytes; on return it holds the length needed, NUL included.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_NAMESERVICE,
 * VIP_ERROR_RESOURCE (Name too small; *NameLen tells the size needed),
 * VIP_INTERRUPTED (as VipNSGetHostByName).
 */
VIP_RETURN VipNSGetHostByAddr(IN VIP_NIC_HANDLE NicHandle, IN VIP_NET_ADDRESS *Address,
                              OUT VIP_CHAR *Name, IN OUT VIP_ULONG *NameLen);

/* Returns VIP_SUCCESS, VIP_INVALID_PARAMETER. */
VIP_RETURN VipNSShutdown(IN VIP_NIC_HANDLE NicHandle);

/* =========================================================== errors, misc */

/*
 * Sets the handler of asynchronous errors (connection lost, receive queue
 * empty, RDMA protection errors, CQ overrun...).  Handlers run on the
 * library's single notification thread.  A NULL handler restores the
 * default, which logs the error.
 * Returns VIP_SUCCESS, VIP_INVALID_PARAMETER, VIP_ERROR_RESOURCE.
 */
VIP_RETURN VipErrorCallback(IN VIP_NIC_HANDLE NicHandle, IN VIP_PVOID Context,
                            IN void (*Handler)(VIP_PVOID Context, VIP_ERROR_DESCRIPTOR *ErrorDesc));

/*
 * InfoType VIP_SMI_AUTODISCOVERY fills a VIP_AUTODISCOVERY_LIST with the
 * hosts reachable through the NIC.  Returns VIP_SUCCESS,
 * VIP_INVALID_PARAMETER, VIP_ERROR_NOT_SUPPORTED (other InfoType),
 * VIP_ERROR_RESOURCE (the list is too short; NumAdAddrs tells how many).
 */
VIP_RETURN VipQuerySystemManagementInfo(IN VIP_NIC_HANDLE NicHandle, IN VIP_ULONG InfoType,
                                        OUT VIP_PVOID SysManInfo);

#ifdef __cplusplus
}
#endif

#endif /* VIPL_H */
