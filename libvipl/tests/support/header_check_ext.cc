// vipl_ext.h alone, in C++.
#include <vipl_ext.h>

static_assert(sizeof(VIP_CONTROL_SEGMENT) == 32);
static_assert(sizeof(VIP_DESCRIPTOR) == 64);
static_assert(sizeof(VIP_DATA_SEGMENT) == 16 && sizeof(VIP_ADDRESS_SEGMENT) == 16);
static_assert(VIP_INTERRUPTED == 17 && VIP_ERROR_REENTERED == 18);
