// rkv::Error and rkv::RequestError are public (include/rkv/error.h): the library's API throws
// them.
#pragma once

#include "rkv/error.h"
