// The handshake both connection set-ups share (shm_handshake.cc): client-server
// (shm_conn.cc) and peer-to-peer (shm_p2p.cc).
#pragma once

#include "prov/shm/shm.h"
#include "prov/shm/shm_wire.h"

#include <string>

namespace vipl::shm {

// The peer's attributes as VipConnectRequest/ConnectWait report them.
void fill_attrs(const WireAttrs &w, VIP_VI_ATTRIBUTES *out);
// VIP_SUCCESS when the peer's attributes match vi's, else why not.
VIP_RETURN check_match(const Vi *vi, const WireAttrs &w);
// The request a requester (kMsgRequest, kMsgPeerRequest) sends from address local.
Hello make_hello(uint32_t type, Vi *vi, const VIP_NET_ADDRESS *local);
// Acceptor: makes the connection memory, sends Accept with its descriptors on sock and
// waits for the requester's Ack; the VI is connected on VIP_SUCCESS.
VIP_RETURN offer(Vi *vi, int sock, const Hello &hello, pid_t peer_pid, VIP_VI_ATTRIBUTES *rattrs);
// Acceptor: refuses the request on sock with reason.
void send_reject(int sock, VIP_RETURN reason);
// Requester: waits for the acceptor's answer until deadline (without block: looks
// whether it has come, VIP_TIMEOUT if not); the connection is made on Accept.
VIP_RETURN await_answer(Vi *vi, int sock, uint64_t deadline, VIP_VI_ATTRIBUTES *rattrs,
                        bool block = true);
// connect() to an abstract name: 0, or the errno.
int connect_name(int sock, const std::string &name);
bool same_disc(const uint8_t *a, uint16_t alen, const uint8_t *b, uint16_t blen);

} // namespace vipl::shm
