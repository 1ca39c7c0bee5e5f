// The build's commit (core/build_info.h), from the header cmake/GitCommit.cmake
// writes at build time.
#include "core/build_info.h"

#include "futr_commit.h"  // FUTR_COMMIT

namespace futr {

const char* build_commit() { return FUTR_COMMIT; }

}  // namespace futr
