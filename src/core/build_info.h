// What was built: the git commit the build was configured at. Defined in a
// source file generated at configure time (src/core/build_info.cpp.in), so the
// commit is not a compile definition of every translation unit (one would
// change every command line at every commit and defeat ccache).
#pragma once

namespace futr {

const char* build_commit();  // e.g. "8bf0485c1a2b", or "unknown"

}  // namespace futr
