#include "vipl/error.h"
