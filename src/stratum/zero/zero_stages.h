#pragma once
// Internal: the factories of zero_stage{0,1,2}.cpp and what stages 0 and 1 share.
#include "stratum/zero/strategy.h"

namespace stratum::zero {

std::unique_ptr<ZeroStrategy> make_stage0(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<dist::Communicator>);
std::unique_ptr<ZeroStrategy> make_stage1(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<dist::Communicator>);
std::unique_ptr<ZeroStrategy> make_stage2(const ZeroOptions&, std::vector<at::Tensor>, std::vector<std::string>,
                                          at::ScalarType, std::shared_ptr<dist::Communicator>);

// Makes each parameter's .grad a view of `flat_grads`, so that autograd
// accumulates into the flat buffer in place (stages 0 and 1).
void attach_grad_views(const at::Tensor& flat_grads, const FlatLayout& layout, std::vector<at::Tensor>& params);

}  // namespace stratum::zero
