// The shm provider's handshake messages, sent over an abstract AF_UNIX socket
// (SOCK_SEQPACKET: one message each, descriptors attached):
//
//   requester                          acceptor
//   Hello (attributes, probe address) ->
//                                   <- Accept + [memfd, acceptor's eventfd, region table]
//   Ack + [requester's eventfd, region table] ->
//
// The memfd reaches only these two processes.  The socket then stays open, silent, so
// that either side sees the other hang up.  Both ends run the same library build on the
// same host: host byte order, checked by kMagic and kVersion (shm.h).
#pragma once

#include "prov/shm/shm.h"

#include <cstdint>

namespace vipl::shm {

enum MsgType : uint32_t { kMsgRequest = 1, kMsgPeerRequest, kMsgAccept, kMsgReject, kMsgAck };

struct WireAttrs {
    uint32_t reliability;
    uint32_t rdma;
    uint64_t mtu;
};

struct Hello {
    uint32_t magic, version, type, pid;
    uint64_t nic_id;
    WireAttrs attrs;
    uint64_t probe;
    uint16_t host_len, disc_len; // the sender's address
    uint8_t addr[kHostAddressLen + kMaxDiscriminator];
    uint16_t want_len, pad; // peer-to-peer: the discriminator expected at the other end
    uint8_t want[kMaxDiscriminator];
};

struct Answer {
    uint32_t magic, version, type, pid;
    uint64_t nic_id;
    WireAttrs attrs;
    uint64_t probe;
    uint32_t reason; // reject: the VIP_RETURN the requester gets
    uint32_t ring_size, header_size, regions;
    uint64_t map_size;
};

struct Ack {
    uint32_t magic, version, type, pid;
    uint64_t nic_id;
    uint32_t regions, pad;
};

} // namespace vipl::shm
