// What was built: the git commit of the checkout at build time ("-dirty" when
// tracked files differed from it). Defined in one source file that includes a
// header written at build time (cmake/GitCommit.cmake), so the commit is not a
// compile definition of every translation unit (one would change every
// command line at every commit and defeat ccache).
#pragma once

namespace futr {

const char* build_commit();  // e.g. "8bf0485c1a2b", "8bf0485c1a2b-dirty" or "unknown"

}  // namespace futr
