#include "vipl/uri.h"
