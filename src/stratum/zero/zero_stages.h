#pragma once
// Internal: the factories of zero_stage{0,1,2}.cpp.
#include "stratum/zero/strategy.h"

namespace stratum::zero {

std::unique_ptr<ZeroStrategy> make_stage0(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<distributed::Communicator>);
std::unique_ptr<ZeroStrategy> make_stage1(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<distributed::Communicator>, const LayerParams*);
std::unique_ptr<ZeroStrategy> make_stage2(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<distributed::Communicator>, const LayerParams*);

}  // namespace stratum::zero
