#include "vipl/error.h"

#include <vipl.h>
#include <vipl_ext.h>

namespace vipl {
namespace {

class ViplCategory final : public std::error_category {
public:
    const char *name() const noexcept override { return "vipl"; }
    std::string message(int code) const override {
        return VipReturnString(static_cast<VIP_RETURN>(code));
    }
    std::error_condition default_error_condition(int code) const noexcept override {
        switch (code) {
        case VIP_NOT_DONE:
            return std::errc::operation_would_block;
        case VIP_INVALID_PARAMETER:
            return std::errc::invalid_argument;
        case VIP_ERROR_RESOURCE:
            return std::errc::no_buffer_space;
        case VIP_TIMEOUT:
            return std::errc::timed_out;
        case VIP_REJECT:
            return std::errc::connection_refused;
        case VIP_NO_MATCH:
            return std::errc::connection_refused;
        case VIP_NOT_REACHABLE:
            return std::errc::host_unreachable;
        case VIP_ERROR_NAMESERVICE:
            return std::errc::host_unreachable;
        case VIP_INVALID_STATE:
            return std::errc::not_connected;
        case VIP_ERROR_NOT_SUPPORTED:
            return std::errc::operation_not_supported;
        case VIP_INTERRUPTED:
            return std::errc::interrupted;
        default:
            return std::error_condition(code, *this);
        }
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
    switch (vip_return) {
    case VIP_TIMEOUT:
        return std::make_error_code(std::errc::timed_out);
    case VIP_INTERRUPTED:
        return std::make_error_code(std::errc::interrupted);
    case VIP_REJECT:
    case VIP_NO_MATCH:
        return std::make_error_code(std::errc::connection_refused);
    case VIP_NOT_REACHABLE:
        return std::make_error_code(std::errc::host_unreachable);
    default:
        return make_vip_error(vip_return);
    }
}

} // namespace vipl
