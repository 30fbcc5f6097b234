// tally's version: one string, from CMake's project(VERSION ...) in the top CMakeLists.txt.
// tallyd --version, tally --version, INFO server's tally_version, GET /v1/status and the
// Debian package all report it.
#pragma once

#include <string_view>

namespace tally {

// "0.1.0". Defined in version.cc, the only file compiled with the version, so that a new
// version rebuilds one file.
std::string_view Version();

}  // namespace tally
