// Name service, error callback, system management information.
#include "api/entry.h"
#include "core/notify.h"
#include "prov/provider.h"

namespace vipl {
extern "C" {

VIP_RETURN VipNSInit(VIP_NIC_HANDLE NicHandle, VIP_PVOID) {
    return api_call([&] { return find_nic(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER; });
}

VIP_RETURN VipNSGetHostByName(VIP_NIC_HANDLE NicHandle, VIP_CHAR *Name, VIP_NET_ADDRESS *Address,
                              VIP_ULONG NameIndex) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !Name || !Address) return VIP_INVALID_PARAMETER;
        return nic->ops->nic->ns_by_name(nic, Name, Address, NameIndex);
    });
}

VIP_RETURN VipNSGetHostByAddr(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *Address, VIP_CHAR *Name,
                              VIP_ULONG *NameLen) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !Address || !Name || !NameLen) return VIP_INVALID_PARAMETER;
        return nic->ops->nic->ns_by_addr(nic, Address, Name, NameLen);
    });
}

VIP_RETURN VipNSShutdown(VIP_NIC_HANDLE NicHandle) {
    return api_call([&] { return find_nic(NicHandle) ? VIP_SUCCESS : VIP_INVALID_PARAMETER; });
}

VIP_RETURN VipErrorCallback(VIP_NIC_HANDLE NicHandle, VIP_PVOID Context,
                            void (*Handler)(VIP_PVOID, VIP_ERROR_DESCRIPTOR *)) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic) return VIP_INVALID_PARAMETER;
        if (Handler) {
            VIP_RETURN rc = notifier_start();
            if (rc != VIP_SUCCESS) return rc;
        }
        std::lock_guard<Mutex> g(nic->error_lock);
        nic->error_handler = Handler;
        nic->error_context = Context;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipQuerySystemManagementInfo(VIP_NIC_HANDLE NicHandle, VIP_ULONG InfoType,
                                        VIP_PVOID SysManInfo) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !SysManInfo) return VIP_INVALID_PARAMETER;
        if (InfoType != VIP_SMI_AUTODISCOVERY) return VIP_ERROR_NOT_SUPPORTED;
        return nic->ops->nic->autodiscovery(nic, static_cast<VIP_AUTODISCOVERY_LIST *>(SysManInfo));
    });
}

} // extern "C"
} // namespace vipl
