// VipOpenNic, VipCloseNic, VipQueryNic, protection tags and memory registration.
#include "api/entry.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi_guard.h"
#include "core/vma.h"
#include "prov/provider.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace vipl {

constinit thread_local int t_api_depth __attribute__((tls_model("initial-exec"))) = 0;

static void default_attributes(Nic *nic) {
    const Config &c = config();
    VIP_NIC_ATTRIBUTES &a = nic->attrs;
    a = VIP_NIC_ATTRIBUTES{};
    a.ThreadSafe = VIP_TRUE;
    a.MaxRegisterBytes = c.max_register_bytes;
    a.MaxRegisterRegions = c.max_regions;
    a.MaxRegisterBlockBytes = c.max_register_bytes;
    a.MaxVI = c.max_vi;
    a.MaxDescriptorsPerQueue = c.max_queue;
    a.MaxSegmentsPerDesc = c.max_segments;
    a.MaxCQ = c.max_cq;
    a.MaxCQEntries = c.max_cq_entries;
    a.MaxTransferSize = c.max_transfer;
    a.MaxPtags = c.max_ptags;
    a.LocalNicAddress = nic->address;
}

// Whether [addr, addr+len) is mapped: mincore fails with ENOMEM on holes.
static bool mapped(uint64_t addr, uint64_t len) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = addr & ~static_cast<uint64_t>(page - 1);
    uint64_t end = addr + len;
    static thread_local std::vector<unsigned char> vec;
    const uint64_t chunk = 65536ull * page;
    for (uint64_t p = start; p < end; p += chunk) {
        uint64_t n = std::min(chunk, end - p);
        vec.resize((n + page - 1) / page);
        if (mincore(reinterpret_cast<void *>(p), n, vec.data()) < 0) return false;
    }
    return true;
}

extern "C" {

VIP_RETURN VipOpenNic(const VIP_CHAR *DeviceName, VIP_NIC_HANDLE *NicHandle) {
    return api_call([&] {
        if (!DeviceName || !NicHandle) return VIP_INVALID_PARAMETER;
        const ProviderOps *ops = provider_for(DeviceName);
        if (!ops) {
            VIPL_INFO("VipOpenNic: no provider opens device \"%s\"", DeviceName);
            return VIP_INVALID_PARAMETER;
        }
        Nic *nic = nics().create(UINT32_MAX, false);
        if (!nic) return VIP_ERROR_RESOURCE;
        std::unique_lock<Mutex> held(nic->lock, std::adopt_lock);
        nic->ops = ops;
        nic->prov = nullptr;
        nic->ptags = 0;
        nic->vis.clear();
        nic->cqs.clear();
        nic->error_handler = nullptr;
        nic->error_context = nullptr;
        nic->errors.clear();
        memset(nic->address, 0, sizeof nic->address);
        default_attributes(nic);
        if (!nic->regions.init(config().max_regions)) {
            held.unlock();
            nics().release(nic, true);
            return VIP_ERROR_RESOURCE;
        }
        VIP_RETURN rc = ops->nic->open(nic, DeviceName);
        if (rc != VIP_SUCCESS) {
            nic->regions.destroy();
            held.unlock();
            nics().release(nic, true);
            return rc;
        }
        *NicHandle = nics().handle_of(nic);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic) return VIP_INVALID_PARAMETER;
        close_nic(nic, NicHandle);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *Attributes) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !Attributes) return VIP_INVALID_PARAMETER;
        *Attributes = nic->attrs;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE *Ptag) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !Ptag) return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        if (nic->ptags >= nic->attrs.MaxPtags) return VIP_ERROR_RESOURCE;
        vipl::Ptag *p = ptags().create(UINT32_MAX, false);
        if (!p) return VIP_ERROR_RESOURCE;
        p->nic = nic;
        p->users = 0;
        ++nic->ptags;
        *Ptag = ptags().handle_of(p);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE Ptag) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic) return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        vipl::Ptag *p = find_ptag(nic, Ptag);
        if (!p) return VIP_INVALID_PARAMETER;
        if (p->users.load() > 0) return VIP_INVALID_STATE;
        --nic->ptags;
        ptags().release(p, true);
        return VIP_SUCCESS;
    });
}

static uint32_t region_flags(const VIP_MEM_ATTRIBUTES &a) {
    return (a.EnableRdmaWrite ? uint32_t(kRegionRdmaWrite) : 0u) |
           (a.EnableRdmaRead ? uint32_t(kRegionRdmaRead) : 0u) |
           (a.Shareable ? uint32_t(kRegionShareable) : 0u);
}

VIP_RETURN VipRegisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress, VIP_ULONG Length,
                          VIP_MEM_ATTRIBUTES *MemAttribs, VIP_MEM_HANDLE *MemHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !VirtualAddress || !Length || !MemAttribs || !MemHandle)
            return VIP_INVALID_PARAMETER;
        uint64_t addr = reinterpret_cast<uint64_t>(VirtualAddress);
        if (addr + Length < addr) return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        vipl::Ptag *p = find_ptag(nic, MemAttribs->Ptag);
        if (!p) return VIP_INVALID_PTAG;
        if (Length > nic->attrs.MaxRegisterBlockBytes ||
            nic->regions.bytes() + Length > nic->attrs.MaxRegisterBytes) {
            VIPL_INFO("VipRegisterMem: %lu bytes exceed the NIC's registration limits", Length);
            return VIP_ERROR_RESOURCE;
        }
        if (!mapped(addr, Length)) {
            VIPL_INFO("VipRegisterMem: [%p, +%lu) is not mapped", VirtualAddress, Length);
            return VIP_INVALID_PARAMETER;
        }
        if (MemAttribs->Shareable && !vma_shared(addr, Length)) {
            VIPL_WARN("VipRegisterMem: shareable memory [%p, +%lu) is not a shared mapping "
                      "(MAP_SHARED, memfd, shm): a fork child would get a copy",
                      VirtualAddress, Length);
            return VIP_INVALID_PARAMETER;
        }
        if (MemAttribs->Shareable) nic->regions.share_with_children();
        VIP_RETURN rc =
            nic->regions.add(addr, Length, p->id(), region_flags(*MemAttribs), MemHandle);
        if (rc == VIP_SUCCESS) p->users.fetch_add(1);
        return rc;
    });
}

// Whether a queued descriptor of vi lies in, or points into, region index ri.
static bool queue_uses(Vi *vi, WorkQueue &q, uint32_t ri) {
    for (uint64_t i = q.head; i < q.tail; ++i) {
        WqEntry &e = q.at(i);
        for (uint32_t r : e.regions)
            if (r == ri) return true;
        if (e.more_segments) {
            VIP_DESCRIPTOR *d = e.desc;
            uint32_t n = d->CS.SegCount;
            for (uint32_t s = 0; s < n && s < vi->nic->attrs.MaxSegmentsPerDesc; ++s)
                if (region_index((&d->DS[0] + s)->Local.Handle) == ri) return true;
        }
    }
    return false;
}

VIP_RETURN VipDeregisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                            VIP_MEM_HANDLE MemHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic) return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        const RegionEntry *e = nic->regions.find(MemHandle);
        if (!e || e->base != reinterpret_cast<uint64_t>(VirtualAddress))
            return VIP_INVALID_PARAMETER;
        uint32_t ptag = e->ptag;
        // Hide the region first so no new post can start using it, then look
        // for posted descriptors that still do.
        nic->regions.set_live(MemHandle, false);
        uint32_t ri = region_index(MemHandle);
        bool used = false;
        for (Vi *vi : nic->vis) {
            ViGuard vg(vi);
            if (queue_uses(vi, vi->sq, ri) || queue_uses(vi, vi->rq, ri)) {
                used = true;
                break;
            }
        }
        if (used) {
            nic->regions.set_live(MemHandle, true);
            return VIP_INVALID_STATE;
        }
        nic->regions.remove(MemHandle);
        if (vipl::Ptag *p = ptags().at_index(ptag - 1)) p->users.fetch_sub(1);
        return VIP_SUCCESS;
    });
}

} // extern "C"

// The memory-attribute calls: fn(nic, region) under the NIC's lock, for the region of
// handle h that holds addr.  VIP_INVALID_PARAMETER when there is no such NIC or region,
// or no attributes.
template <class Fn>
static VIP_RETURN with_region(VIP_NIC_HANDLE handle, VIP_PVOID addr, VIP_MEM_HANDLE h,
                              const VIP_MEM_ATTRIBUTES *attrs, Fn fn) {
    return api_call([&] {
        Nic *nic = find_nic(handle);
        if (!nic || !attrs) return VIP_INVALID_PARAMETER;
        std::lock_guard<Mutex> g(nic->lock);
        const RegionEntry *e = nic->regions.find(h);
        uint64_t a = reinterpret_cast<uint64_t>(addr);
        if (!e || a < e->base || a - e->base >= e->length) return VIP_INVALID_PARAMETER;
        return fn(nic, e);
    });
}

extern "C" {

VIP_RETURN VipQueryMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress, VIP_MEM_HANDLE MemHandle,
                       VIP_MEM_ATTRIBUTES *MemAttribs) {
    auto query = [&](Nic *, const RegionEntry *e) {
        vipl::Ptag *p = ptags().at_index(e->ptag - 1);
        uint32_t flags = e->flags.load();
        MemAttribs->Ptag = p ? ptags().handle_of(p) : nullptr;
        MemAttribs->EnableRdmaWrite = (flags & kRegionRdmaWrite) ? VIP_TRUE : VIP_FALSE;
        MemAttribs->EnableRdmaRead = (flags & kRegionRdmaRead) ? VIP_TRUE : VIP_FALSE;
        MemAttribs->Shareable = (flags & kRegionShareable) ? VIP_TRUE : VIP_FALSE;
        return VIP_SUCCESS;
    };
    return with_region(NicHandle, VirtualAddress, MemHandle, MemAttribs, query);
}

VIP_RETURN VipSetMemAttributes(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                               VIP_MEM_HANDLE MemHandle, VIP_MEM_ATTRIBUTES *MemAttribs) {
    auto set = [&](Nic *nic, const RegionEntry *e) {
        vipl::Ptag *p = find_ptag(nic, MemAttribs->Ptag);
        if (!p) return VIP_INVALID_PTAG;
        if (MemAttribs->Shareable && !(e->flags.load() & kRegionShareable) &&
            !vma_shared(e->base, e->length)) {
            VIPL_WARN("VipSetMemAttributes: [%p, +%lu) is not a shared mapping", VirtualAddress,
                      static_cast<unsigned long>(e->length));
            return VIP_INVALID_PARAMETER;
        }
        if (MemAttribs->Shareable) nic->regions.share_with_children();
        uint32_t old = e->ptag;
        nic->regions.set(MemHandle, p->id(), region_flags(*MemAttribs));
        if (old != p->id()) {
            p->users.fetch_add(1);
            if (vipl::Ptag *o = ptags().at_index(old - 1)) o->users.fetch_sub(1);
        }
        return VIP_SUCCESS;
    };
    return with_region(NicHandle, VirtualAddress, MemHandle, MemAttribs, set);
}

} // extern "C"
} // namespace vipl
