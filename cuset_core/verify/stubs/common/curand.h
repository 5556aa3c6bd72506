// Stand-in: see cuset_math_libs.h.
#pragma once
#include "cuset_math_libs.h"
