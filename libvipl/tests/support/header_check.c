/* vipl.h alone, in C: a program written for the VIPL header compiles. */
#include <vipl.h>

VIP_RETURN header_check_c(void) {
    VIP_DESCRIPTOR d = {0};
    d.CS.Control = VIP_CONTROL_OP_SENDRECV | VIP_CONTROL_IMMEDIATE;
    d.DS[0].Local.Data.Address = &d;
    d.DS[1].Remote.Handle = 0;
    return d.CS.Status & VIP_STATUS_DONE ? VIP_SUCCESS : VIP_NOT_DONE;
}
