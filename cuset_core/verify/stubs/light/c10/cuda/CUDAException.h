// Light stand-in (see cuset_torch_light_cuda.h).
#pragma once
#include <cuset_torch_light_cuda.h>
