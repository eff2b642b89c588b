// The ends of a connection and of a listener as Addresses (vipl/address.h), from what
// libvipl reports of them.
#pragma once

#include "nic.h"
#include "vipl/address.h"

namespace vipl::detail {

// The two ends of a connected VI (VipQueryViEndpoints).  `listener` is the URI of the
// Listener the connection reached: its port or service names the listening end, which
// is this end when `listening_end`.  False, both left empty, if libvipl cannot tell.
bool vi_ends(VIP_VI_HANDLE vi, const Uri &listener, bool listening_end, Address *local,
             Address *peer);

// Where a listener on `nic` for `uri` listens.
Address listen_address(const Nic &nic, const Uri &uri);

} // namespace vipl::detail
