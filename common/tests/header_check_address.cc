#include "vipl/address.h"
