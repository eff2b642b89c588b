# Cross-compiling for Linux on s390x (64-bit, big-endian) with Debian's
# g++-s390x-linux-gnu.  Compiling with --sysroot keeps the build machine's
# /usr/include off the search path (Debian's cross compilers otherwise look
# there last); linking without it, since the cross libc.so names its parts by
# absolute paths that a sysroot would prefix.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(CMAKE_C_COMPILER s390x-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER s390x-linux-gnu-g++)
set(CMAKE_SYSROOT_COMPILE /usr/s390x-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/s390x-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
