// libomniviplTP4: omniORB 4.2.5's GIOP transport "giop:vipl" over VIPL byte streams.
//
// Loading the library registers the transport; nothing needs to be called.  A program
// linked with -lomniviplTP4 must really load it: link with -Wl,--no-as-needed, or
// include this header and write VIPL_OMNI_FORCE_LINK(); at namespace scope in one
// source file.  An unmodified omniORB program loads it with
// LD_PRELOAD=libomniviplTP4.so.
//
// Endpoints: -ORBendPoint giop:vipl:<host>:<port>   (host optional, port 0 = any)
// Options (-ORB<key> <value>, or "<key> = <value>" in omniORB.cfg): the stream's own
// (vipl/stream_config.h: the same ranges and defaults as VIPL_STREAM_*), and the provider.
//   viplSpinTime     STREAM_SPIN_US: microseconds polled before sleeping (default 20)
//   viplBufferSize   STREAM_BUFFER_SIZE: bytes per message buffer (default 65536)
//   viplRecvBuffers  STREAM_RECV_BUFFERS: receive buffers per connection (default 16)
//   viplSendBuffers  STREAM_SEND_BUFFERS: send buffers per connection (default 16)
//   viplLinger       STREAM_LINGER_MS: ms a closing connection waits for the peer (5000)
//   viplProvider     auto | shm | tcp (default auto: shm for this host)
//
// Thread and signal rules: the functions below are thread-safe and not
// async-signal-safe.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Counters of this process since the library was loaded.
struct vipl_omni_stats {
    uint64_t accepted;  // giop:vipl connections accepted by servers
    uint64_t connected; // giop:vipl connections made by clients
};

// Fills *out.  Never fails.
void vipl_omni_get_stats(struct vipl_omni_stats *out);

// The library's version as 10000 * major + 100 * minor + patch.
int vipl_omni_version(void);

#ifdef __cplusplus
}
#endif

#define VIPL_OMNI_FORCE_LINK()                                                                     \
    extern "C" int vipl_omni_version(void);                                                        \
    [[maybe_unused]] static int (*const vipl_omni_force_link_)(void) = &vipl_omni_version
