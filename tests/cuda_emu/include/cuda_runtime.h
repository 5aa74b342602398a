// The CUDA emulation's stand-in for the CUDA runtime header: everything is
// declared by the forced include cuda_emu.hpp.
#pragma once
#include "cuda_emu.hpp"
