#include "vipl/error.h"

#include <vipl.h>
#include <vipl_ext.h>

namespace vipl {
namespace {

// Every VIP_RETURN that means something to a socket user: the std::errc it compares
// equal to, and whether a socket-like call reports it as that errc itself (a timeout,
// a refusal: what connect() or recv() would say) rather than as a vipl code.
struct Mapping {
    VIP_RETURN vip;
    std::errc errc;
    bool socket;
};
constexpr Mapping kMappings[] = {
    {VIP_NOT_DONE, std::errc::operation_would_block, false},
    {VIP_INVALID_PARAMETER, std::errc::invalid_argument, false},
    {VIP_ERROR_RESOURCE, std::errc::no_buffer_space, false},
    {VIP_TIMEOUT, std::errc::timed_out, true},
    {VIP_REJECT, std::errc::connection_refused, true},
    {VIP_NO_MATCH, std::errc::connection_refused, true},
    {VIP_NOT_REACHABLE, std::errc::host_unreachable, true},
    {VIP_ERROR_NAMESERVICE, std::errc::host_unreachable, false},
    {VIP_INVALID_STATE, std::errc::not_connected, false},
    {VIP_ERROR_NOT_SUPPORTED, std::errc::operation_not_supported, false},
    {VIP_INTERRUPTED, std::errc::interrupted, true},
};

const Mapping *mapping(int code) noexcept {
    for (const Mapping &m : kMappings)
        if (m.vip == code) return &m;
    return nullptr;
}

class ViplCategory final : public std::error_category {
public:
    const char *name() const noexcept override { return "vipl"; }
    std::string message(int code) const override {
        return VipReturnString(static_cast<VIP_RETURN>(code));
    }
    std::error_condition default_error_condition(int code) const noexcept override {
        if (const Mapping *m = mapping(code)) return m->errc;
        return std::error_condition(code, *this);
    }
};

} // namespace

const std::error_category &vipl_category() noexcept {
    static const ViplCategory category;
    return category;
}

std::error_code make_vip_error(int vip_return) noexcept {
    if (vip_return == VIP_SUCCESS) return {};
    return {vip_return, vipl_category()};
}

std::error_code make_socket_error(int vip_return) noexcept {
    const Mapping *m = mapping(vip_return);
    if (m && m->socket) return std::make_error_code(m->errc);
    return make_vip_error(vip_return);
}

} // namespace vipl
