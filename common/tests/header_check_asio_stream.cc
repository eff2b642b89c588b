#include "vipl/asio_stream.h"
