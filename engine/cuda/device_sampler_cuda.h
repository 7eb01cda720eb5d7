// The CUDA DeviceSampler: per-row parameters and penalty histories go up, cuda_sampling::sample
// draws on the device, token ids and logprobs come back (a few bytes per row).
#pragma once

#include <memory>

#include "engine/device_sampler.h"

namespace pg {

std::shared_ptr<DeviceSampler> make_cuda_device_sampler();

}  // namespace pg
