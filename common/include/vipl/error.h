// Errors of the common layer are std::error_code values.  Conditions a program tests for
// use std::errc in the generic category (operation_would_block, timed_out, interrupted,
// connection_reset, broken_pipe, connection_refused, not_connected, invalid_argument...).
// A libvipl return code that has no better meaning is carried in vipl_category(), whose
// message() is VipReturnString and whose conditions map onto std::errc where one fits
// (VIP_TIMEOUT == std::errc::timed_out, VIP_INTERRUPTED == std::errc::interrupted...).
// Thread-safe; not async-signal-safe.
#pragma once

#include <system_error>

namespace vipl {

const std::error_category &vipl_category() noexcept;

// An error_code for a VIP_RETURN value (VIP_SUCCESS gives the empty error_code).
std::error_code make_vip_error(int vip_return) noexcept;

// The same, but the outcomes a socket program knows by name come in the generic
// category, as a socket call would give them: VIP_TIMEOUT timed_out, VIP_INTERRUPTED
// interrupted, VIP_REJECT and VIP_NO_MATCH connection_refused, VIP_NOT_REACHABLE
// host_unreachable.  What streams and listeners return.
std::error_code make_socket_error(int vip_return) noexcept;

} // namespace vipl
