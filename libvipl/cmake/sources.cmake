# The library's sources, in one list for every build that compiles them: the library
# itself, the fuzzers (with coverage) and the s390x byte-order peer (cross-compiled in).
# Expects VIPL_DIR, libvipl's folder; sets VIPL_SOURCES.
file(GLOB VIPL_SOURCES CONFIGURE_DEPENDS
  ${VIPL_DIR}/src/api/*.cc ${VIPL_DIR}/src/core/*.cc ${VIPL_DIR}/src/prov/*.cc
  ${VIPL_DIR}/src/prov/shm/*.cc ${VIPL_DIR}/src/prov/tcp/*.cc ${VIPL_DIR}/src/prov/util/*.cc)
