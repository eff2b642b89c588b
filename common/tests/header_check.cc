// Each public header compiles on its own (this file includes each one first).
#include "vipl/stream.h"
