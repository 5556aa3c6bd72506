// Light stand-in (see cuset_torch_light.h).
#pragma once
#include <cuset_torch_light.h>
