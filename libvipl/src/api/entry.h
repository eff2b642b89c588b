// What every C entry point does first: refuse re-entry from a signal handler
// and keep C++ exceptions from crossing the C API.
#pragma once

#include "core/objects.h"
#include "core/vi_guard.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <new>

namespace vipl {

extern constinit thread_local int t_api_depth __attribute__((tls_model("initial-exec")));

class ApiScope {
public:
    ApiScope() : reentered_(t_api_depth++ > 0) {}
    ~ApiScope() { --t_api_depth; }
    bool reentered() const { return reentered_; }

private:
    bool reentered_;
};

template <class F>
inline VIP_RETURN api_call(F &&body) {
    ApiScope scope;
    if (scope.reentered()) return VIP_ERROR_REENTERED;
    try {
        return body();
    } catch (...) {
        return VIP_ERROR_RESOURCE;
    }
}

inline Nic *find_nic(VIP_NIC_HANDLE h) {
    return nics().lookup(h);
}
__attribute__((always_inline)) inline Vi *find_vi(VIP_VI_HANDLE h) {
    return vis().lookup(h);
}
// The shape of a call that works on one VI under its lock: h must name a VI (args_ok: the
// caller's own checks of its arguments), and still the same one once the lock is taken
// (a racing VipDestroyVi); then body(vi) answers.
template <class F>
inline VIP_RETURN locked_vi_call(VIP_VI_HANDLE h, bool args_ok, F &&body) {
    return api_call([&] {
        Vi *vi = find_vi(h);
        if (!vi || !args_ok) return VIP_INVALID_PARAMETER;
        ViGuard g(vi);
        if (!vis().still(vi, h)) return VIP_INVALID_PARAMETER;
        return body(vi);
    });
}
inline Cq *find_cq(VIP_CQ_HANDLE h) {
    return cqs().lookup(h);
}
inline ConnReq *find_conn(VIP_CONN_HANDLE h) {
    return conns().lookup(h);
}
inline Ptag *find_ptag(Nic *nic, VIP_PROTECTION_HANDLE h) {
    Ptag *p = ptags().lookup(h);
    return (p && p->nic == nic) ? p : nullptr;
}

} // namespace vipl
