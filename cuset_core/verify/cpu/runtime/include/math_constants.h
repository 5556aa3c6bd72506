// CPU stand-in (CuSeT tier 2): everything lives in the runtime header.
#pragma once
#include "cuda_cpu.h"
