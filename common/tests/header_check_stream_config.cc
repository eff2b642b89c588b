#include "vipl/stream_config.h"
