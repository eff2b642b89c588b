// vipl-info: the providers, each NIC's attributes, every configuration key.
#include <vipl.h>
#include <vipl_ext.h>

#include <cstdio>
#include <cstring>

namespace {

void print_nic(const char *device) {
    VIP_NIC_HANDLE nic;
    VIP_RETURN rc = VipOpenNic(device, &nic);
    if (rc != VIP_SUCCESS) {
        printf("  %s: cannot open (%s)\n", device, VipReturnString(rc));
        return;
    }
    VIP_NIC_ATTRIBUTES a;
    VipQueryNic(nic, &a);
    printf("  device %s\n", device);
    printf("    Name                    %s\n", a.Name);
    printf("    HardwareVersion         %lu\n", a.HardwareVersion);
    printf("    ProviderVersion         %lu\n", a.ProviderVersion);
    printf("    LocalNicAddress         ");
    for (int i = 0; i < a.NicAddressLen; ++i) printf("%02x", a.LocalNicAddress[i]);
    printf(" (%u bytes)\n", a.NicAddressLen);
    printf("    ThreadSafe              %s\n", a.ThreadSafe ? "yes" : "no");
    printf("    MaxDiscriminatorLen     %u\n", a.MaxDiscriminatorLen);
    printf("    MaxRegisterBytes        %lu\n", a.MaxRegisterBytes);
    printf("    MaxRegisterRegions      %lu\n", a.MaxRegisterRegions);
    printf("    MaxRegisterBlockBytes   %lu\n", a.MaxRegisterBlockBytes);
    printf("    MaxVI                   %lu\n", a.MaxVI);
    printf("    MaxDescriptorsPerQueue  %lu\n", a.MaxDescriptorsPerQueue);
    printf("    MaxSegmentsPerDesc      %lu\n", a.MaxSegmentsPerDesc);
    printf("    MaxCQ                   %lu\n", a.MaxCQ);
    printf("    MaxCQEntries            %lu\n", a.MaxCQEntries);
    printf("    MaxTransferSize         %lu\n", a.MaxTransferSize);
    printf("    NativeMTU               %lu\n", a.NativeMTU);
    printf("    MaxPtags                %lu\n", a.MaxPtags);
    printf("    ReliabilityLevelSupport %s%s%s\n",
           a.ReliabilityLevelSupport & VIP_SERVICE_UNRELIABLE ? "unreliable " : "",
           a.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY ? "reliable-delivery " : "",
           a.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_RECEPTION ? "reliable-reception" : "");
    printf("    RDMAReadSupport         %s%s\n",
           a.RDMAReadSupport & VIP_SERVICE_RELIABLE_DELIVERY ? "reliable-delivery " : "",
           a.RDMAReadSupport & VIP_SERVICE_RELIABLE_RECEPTION ? "reliable-reception" : "");
    VipCloseNic(nic);
}

} // namespace

int main(int argc, char **argv) {
    bool only_config = argc > 1 && (!strcmp(argv[1], "-c") || !strcmp(argv[1], "--config"));
    if (argc > 1 && !only_config) {
        fprintf(stderr, "usage: vipl-info [-c|--config]\n");
        return 2;
    }
    if (!only_config) {
        printf("Providers\n");
        for (VIP_ULONG i = 0; i < VipProviderCount(); ++i) {
            VIP_PROVIDER_INFO p;
            VipProviderInfo(i, &p);
            printf("  %-6s devices: %s\n         %s\n", p.Name, p.Devices, p.Summary);
        }
        printf("\nNICs\n");
        for (VIP_ULONG i = 0; i < VipProviderCount(); ++i) {
            VIP_PROVIDER_INFO p;
            VipProviderInfo(i, &p);
            // The first device of each provider; the others differ in address only.
            char devices[1024];
            snprintf(devices, sizeof devices, "%s", p.Devices);
            char *save;
            if (char *d = strtok_r(devices, ", ", &save)) print_nic(d);
        }
        printf("\n");
    }
    printf("Configuration (environment variable VIPL_<KEY>)\n");
    for (VIP_ULONG i = 0; i < VipConfigCount(); ++i) {
        VIP_CONFIG_INFO c;
        VipConfigInfo(i, &c);
        printf("  %-20s default %-16s value %-16s\n      %s\n", c.Name, c.DefaultValue, c.Value,
               c.Help);
    }
    return 0;
}
