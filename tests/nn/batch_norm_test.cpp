// batch_norm and group_norm, and the nn::BatchNorm1d, nn::BatchNorm2d and
// nn::GroupNorm layers: values, gradients and running statistics as PyTorch
// gives them (torch.nn.functional and torch.nn on the same inputs, the numbers
// written out here), state-dict keys, reprs and train()/eval().
#include "tests/nn/pattern_values.h"

#include <cmath>
#include <optional>

#include "dsl/nn/batch_norm.h"
#include "dsl/nn/conv.h"
#include "dsl/normalization.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

Tensor buffer(nn::Module& m, const std::string& name) { return m.named_buffers().at(name); }

int64_t batches_tracked(nn::Module& m) {
  Tensor t = buffer(m, "num_batches_tracked");
  REQUIRE(t.dim() == 0);
  REQUIRE(t.dtype() == DType::i64);
  return t.item<int64_t>();
}

}  // namespace

TEST_CASE("batch_norm in training: batch statistics, the running ones updated in place, and the gradients",
          "[nn][batch_norm]") {
  Tensor x = leaf(pat({3, 2, 2, 2}, 0)), w = leaf(pat({2}, 3)), b = leaf(pat({2}, 5));
  Tensor rm = zeros({2}, DType::f64), rv = ones({2}, DType::f64);
  Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  check_values(y, {3, 2, 2, 2}, {
      1.0798315741, -1.46045230717, -4.00073618844, 0.393268362945, -0.442364869989, -1.22611496478,
      0.129560874859, -0.654189219932, -5.37386261075, -0.979858059364, -3.52014194064, 0.873862610754,
      -0.294087825028, -1.07783791982, 0.27783791982, -0.505912174972, -4.89326836295, -0.499263811556,
      -3.03954769283, -5.5798315741, -0.145810780068, -0.929560874859, 0.42611496478, -0.357635130011});
  // running = 0.9 running + 0.1 batch, the variance unbiased (12 / 11).
  check_values(rm, {2}, {-0.0075, -0.025});
  check_values(rv, {2}, {1.21952272727, 1.05195454545});
  Tensor(y * pat({3, 2, 2, 2}, 37)).sum().backward();
  check_values(x.grad(), {3, 2, 2, 2}, {
      1.33286264622, -1.8881586166, 1.82510855323, 0.462316358974, -0.596293645429, 0.406544795298, 0.233108039165,
      -0.903479454539, 0.0840159787278, -1.27877621553, 2.43449095431, 1.07169876005, -0.381263579053,
      0.621574861674, 0.448138105541, -0.688449388162, 0.693398379803, -0.669393814453, -3.89041507728,
      -0.177147907447, -0.166233512677, 0.83660492805, 0.663168171918, -0.473419321786});
  check_values(w.grad(), {2}, {-5.50346148516, -6.3759129333});
  check_values(b.grad(), {2}, {-3.95, 4.05});
}

TEST_CASE("batch_norm in eval mode normalizes by the running statistics and leaves them alone", "[nn][batch_norm]") {
  Tensor rm = tensor({0.1, -0.2, 0.3}, DType::f64), rv = tensor({0.5, 1.5, 2.0}, DType::f64);
  Tensor y = batch_norm(pat({2, 3, 2}, 1), rm, rv, pat({3}, 2), pat({3}, 4), false, 0.1, 1e-5);
  check_values(y, {2, 3, 2}, {
      6.35490045315, 0.0758550263553, -1.10115385278, 0.335875339563, 1.03230539302, 2.73289295031, 2.96082184407,
      -3.31822358272, -1.55022547539, -0.113196283044, 1.95154191047, -0.990014945381});
  CHECK(vals(rm) == std::vector<double>{0.1, -0.2, 0.3});
  CHECK(vals(rv) == std::vector<double>{0.5, 1.5, 2.0});
}

TEST_CASE("batch_norm over [N, C] without running statistics or affine", "[nn][batch_norm]") {
  check_values(batch_norm(pat({4, 3}, 2), Tensor(), Tensor(), Tensor(), Tensor(), true), {4, 3}, {
      -1.34161932076, -1.34161932076, 0.286474780762, -0.447206440254, -0.447206440254, 0.56596237175,
      0.447206440254, 0.447206440254, 0.845449962737, 1.34161932076, 1.34161932076, -1.69788711525});
}

TEST_CASE("batch_norm over [N, C, L] with momentum 0.3 and eps 1e-3", "[nn][batch_norm]") {
  Tensor rm = tensor({0.5, -0.5}, DType::f64), rv = tensor({2.0, 0.25}, DType::f64);
  Tensor y = batch_norm(pat({4, 2, 3}, 3), rm, rv, Tensor(), Tensor(), true, 0.3, 1e-3);
  check_values(y, {4, 2, 3}, {
      -1.6622123937, -0.436261724593, 0.789688944517, -1.17744064484, 0.129518470932, 1.4364775867,
      -0.999536356346, 0.226414312764, 1.45236498187, -0.470976257935, 0.835982857834, -1.42470318025,
      -0.33686031899, 0.88909035012, -1.23147296942, 0.235488128967, 1.54244724474, -0.71823879335, 0.325815718367,
      1.55176638748, -0.568796932064, 0.941952515869, -1.31873352222, -0.0117744064484});
  check_values(rm, {2}, {0.3975, -0.405});
  check_values(rv, {2}, {2.14493181818, 0.830409090909});
}

TEST_CASE("nn::BatchNorm2d: PyTorch's state-dict keys, shapes, dtypes, initial values and repr", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3);
  CHECK(bn->repr() == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  auto sd = bn->state_dict();
  CHECK(sd.keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  for (const char* k : {"weight", "bias", "running_mean", "running_var"}) {
    INFO(k);
    CHECK(dims(sd.at(k)) == std::vector<int64_t>{3});
    CHECK(sd.at(k).dtype() == DType::f32);
  }
  CHECK(dims(sd.at("num_batches_tracked")).empty());
  CHECK(sd.at("num_batches_tracked").dtype() == DType::i64);
  CHECK(vals(sd.at("weight")) == std::vector<double>{1, 1, 1});
  CHECK(vals(sd.at("bias")) == std::vector<double>{0, 0, 0});
  CHECK(vals(sd.at("running_mean")) == std::vector<double>{0, 0, 0});
  CHECK(vals(sd.at("running_var")) == std::vector<double>{1, 1, 1});
  CHECK(batches_tracked(*bn) == 0);
  CHECK(bn->named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(bn->named_buffers().keys() == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});

  nn::BatchNorm2d plain(4, 1e-3, 0.2, false);
  CHECK(plain->repr() == "BatchNorm2d(4, eps=0.001, momentum=0.2, affine=False, track_running_stats=True)");
  CHECK(plain->parameters().empty());
  CHECK(plain->state_dict().keys() == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});

  nn::BatchNorm1d stateless(4, 1e-3, std::nullopt, false, false);
  CHECK(stateless->repr() == "BatchNorm1d(4, eps=0.001, momentum=None, affine=False, track_running_stats=False)");
  CHECK(stateless->state_dict().empty());
}

TEST_CASE("nn::BatchNorm2d: one training step with momentum 0.1, then eval", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3);
  CHECK(bn->is_training());
  Tensor x1 = pat({2, 3, 2, 2}, 0, DType::f32), x2 = pat({2, 3, 2, 2}, 40, DType::f32);
  Tensor y = bn(x1);
  // The running statistics are there as soon as the forward returns.
  check_values(buffer(*bn, "running_mean"), {3}, {-0.0618749968708, 0.046875, -0.0337499976158}, 1e-6);
  check_values(buffer(*bn, "running_var"), {3}, {1.1077811718, 1.1077811718, 1.15512502193}, 1e-6);
  CHECK(batches_tracked(*bn) == 1);
  CHECK(y.dtype() == DType::f32);
  check_values(y, {2, 3, 2, 2}, {
      -1.39520525932, -0.0231761764735, 1.34885299206, -1.02438664436, -0.458888113499, 0.913141012192,
      -1.46009850502, -0.0880694463849, 1.6983397007, -0.44340890646, 0.794789552689, -1.34695899487,
      0.088069409132, 1.46009850502, -0.913141012192, 0.458888083696, 1.02438664436, -1.34885299206,
      0.023176163435, 1.39520514011, -0.343014448881, 0.895183980465, -1.24656462669, -0.00836621411145}, 1e-5);
  // The state dict sees the same memory.
  check_values(bn->state_dict().at("running_mean"), {3}, {-0.0618749968708, 0.046875, -0.0337499976158}, 1e-6);

  bn->eval();
  CHECK_FALSE(bn->is_training());
  check_values(bn(x2), {2, 3, 2, 2}, {
      -0.416264235973, 1.34142780304, -1.6989043951, 0.0587876699865, 1.71315598488, -1.32717633247,
      0.430515795946, 2.18820786476, -0.759463369846, 0.96183180809, -2.01554369926, -0.294248431921,
      1.48394334316, -1.55638885498, 0.201303243637, 1.95899534225, -1.18466079235, 0.573031365871, 2.33072352409,
      -0.709608793259, 1.10139632225, -1.8759790659, -0.154683962464, 1.56661117077}, 1e-5);
  // Eval changes no statistics.
  check_values(buffer(*bn, "running_mean"), {3}, {-0.0618749968708, 0.046875, -0.0337499976158}, 1e-6);
  check_values(buffer(*bn, "running_var"), {3}, {1.1077811718, 1.1077811718, 1.15512502193}, 1e-6);
  CHECK(batches_tracked(*bn) == 1);

  bn->train();
  bn(x2);
  CHECK(batches_tracked(*bn) == 2);
  bn->reset_running_stats();
  CHECK(vals(buffer(*bn, "running_mean")) == std::vector<double>{0, 0, 0});
  CHECK(vals(buffer(*bn, "running_var")) == std::vector<double>{1, 1, 1});
  CHECK(batches_tracked(*bn) == 0);
}

TEST_CASE("nn::BatchNorm2d with momentum nullopt keeps the cumulative average of the batch statistics",
          "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3, 1e-5, std::nullopt);
  CHECK(bn->repr() == "BatchNorm2d(3, eps=1e-05, momentum=None, affine=True, track_running_stats=True)");
  bn(pat({2, 3, 2, 2}, 0, DType::f32));
  bn(pat({2, 3, 2, 2}, 40, DType::f32));
  // The mean of the two batch means and of the two unbiased batch variances.
  check_values(buffer(*bn, "running_mean"), {3}, {-0.25, 0.521875023842, -0.284374982119}, 1e-6);
  check_values(buffer(*bn, "running_var"), {3}, {2.07781243324, 2.25140619278, 2.31453132629}, 1e-6);
  CHECK(batches_tracked(*bn) == 2);
}

TEST_CASE("nn::BatchNorm1d over [N, C] and [N, C, L]", "[nn][batch_norm]") {
  nn::BatchNorm1d a(3, 1e-5, 0.2);
  check_values(a(pat({4, 3}, 5, DType::f32)), {4, 3}, {
      -1.34161949158, -1.34161937237, 0.286474764347, -0.447206556797, -0.44720646739, 0.56596237421,
      0.447206318378, 0.44720646739, 0.845449984074, 1.34161925316, 1.34161937237, -1.69788718224}, 1e-5);
  check_values(buffer(*a, "running_mean"), {3}, {-0.300000011921, 0.0700000077486, 0.187500029802}, 1e-6);
  check_values(buffer(*a, "running_var"), {3}, {0.883333325386, 0.883333325386, 1.65345835686}, 1e-6);
  nn::BatchNorm1d b(2, 1e-3);
  CHECK(b->repr() == "BatchNorm1d(2, eps=0.001, momentum=0.1, affine=True, track_running_stats=True)");
  check_values(b(pat({2, 2, 3}, 6, DType::f32)), {2, 2, 3}, {
      -1.47665441036, -0.314181745052, 0.848290801048, -1.03620934486, 0.234721451998, 1.50565218925,
      -0.848290801048, 0.314181774855, 1.47665441036, -0.349219709635, 0.921711027622, -1.27665567398}, 1e-5);
  check_values(buffer(*b, "running_mean"), {2}, {0.0149999978021, -0.0191666670144}, 1e-6);
  check_values(buffer(*b, "running_var"), {2}, {1.203799963, 1.15414166451}, 1e-6);
}

TEST_CASE("nn::BatchNorm2d without running statistics uses the batch's in eval mode too", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3, 1e-5, 0.1, true, false);
  CHECK(bn->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(bn->named_buffers().empty());
  Tensor x = pat({2, 3, 2, 2}, 0, DType::f32);
  std::vector<double> train_y = vals(bn(x));
  check_values(Tensor(bn(x)), {2, 3, 2, 2}, {
      -1.39520525932, -0.0231761764735, 1.34885299206, -1.02438664436, -0.458888113499, 0.913141012192,
      -1.46009850502, -0.0880694463849, 1.6983397007, -0.44340890646, 0.794789552689, -1.34695899487,
      0.088069409132, 1.46009850502, -0.913141012192, 0.458888083696, 1.02438664436, -1.34885299206,
      0.023176163435, 1.39520514011, -0.343014448881, 0.895183980465, -1.24656462669, -0.00836621411145}, 1e-5);
  bn->eval();
  check_values(bn(x), {2, 3, 2, 2}, train_y, 1e-6);
}

TEST_CASE("nn::BatchNorm2d gradients reach weight, bias and the input", "[nn][batch_norm]") {
  nn::BatchNorm2d bn(2);
  bn->weight.data().copy_(pat({2}, 3, DType::f32));
  bn->bias.data().copy_(pat({2}, 5, DType::f32));
  Tensor x = leaf(pat({3, 2, 2, 2}, 0, DType::f32));
  Tensor y = bn(x);
  check_values(y, {3, 2, 2, 2}, {
      1.0798315741, -1.46045230717, -4.00073618844, 0.393268362945, -0.442364869989, -1.22611496478,
      0.129560874859, -0.654189219932, -5.37386261075, -0.979858059364, -3.52014194064, 0.873862610754,
      -0.294087825028, -1.07783791982, 0.27783791982, -0.505912174972, -4.89326836295, -0.499263811556,
      -3.03954769283, -5.5798315741, -0.145810780068, -0.929560874859, 0.42611496478, -0.357635130011}, 1e-5);
  Tensor(y * pat({3, 2, 2, 2}, 37, DType::f32)).sum().backward();
  check_values(x.grad(), {3, 2, 2, 2}, {
      1.33286264622, -1.8881586166, 1.82510855323, 0.462316358974, -0.596293645429, 0.406544795298, 0.233108039165,
      -0.903479454539, 0.0840159787278, -1.27877621553, 2.43449095431, 1.07169876005, -0.381263579053,
      0.621574861674, 0.448138105541, -0.688449388162, 0.693398379803, -0.669393814453, -3.89041507728,
      -0.177147907447, -0.166233512677, 0.83660492805, 0.663168171918, -0.473419321786}, 1e-4);
  check_values(bn->weight.grad(), {2}, {-5.50346148516, -6.3759129333}, 1e-4);
  check_values(bn->bias.grad(), {2}, {-3.95, 4.05}, 1e-4);
  check_values(buffer(*bn, "running_mean"), {2}, {-0.0075, -0.025}, 1e-6);
  check_values(buffer(*bn, "running_var"), {2}, {1.21952272727, 1.05195454545}, 1e-6);
}

TEST_CASE("train() and eval() reach every layer of a model, and running statistics load by name", "[nn][batch_norm]") {
  manual_seed(6);
  nn::BatchNorm2d bn(4);
  nn::Sequential net(nn::Conv2d(2, 4, 3, Conv2dOptions{.padding = 1}), bn, nn::ReLU());
  CHECK(net->state_dict().keys() == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                                              "1.running_mean", "1.running_var",
                                                              "1.num_batches_tracked"});
  Tensor x = pat({2, 2, 3, 3}, 7, DType::f32);
  net(x);
  CHECK(batches_tracked(*bn) == 1);
  net->eval();
  for (auto& m : net->modules()) CHECK_FALSE(m->is_training());
  // In eval mode the output is relu((conv - running_mean) / sqrt(running_var + eps)).
  Tensor conv = net[0](x);
  Tensor rm = buffer(*bn, "running_mean").reshape({1, 4, 1, 1}), rv = buffer(*bn, "running_var").reshape({1, 4, 1, 1});
  Tensor want = relu(Tensor((conv - rm) / Tensor(rv + 1e-5).sqrt()));
  require_close(vals(net(x)), vals(want), 1e-5, 1e-5);
  CHECK(batches_tracked(*bn) == 1);
  net->train();
  for (auto& m : net->modules()) CHECK(m->is_training());

  nn::BatchNorm2d copy(4);
  copy->load_state_dict(bn->state_dict());
  CHECK(vals(buffer(*copy, "running_mean")) == vals(buffer(*bn, "running_mean")));
  CHECK(vals(buffer(*copy, "running_var")) == vals(buffer(*bn, "running_var")));
  CHECK(batches_tracked(*copy) == 1);
}

TEST_CASE("group_norm over groups of channels, with an affine: values and gradients", "[nn][group_norm]") {
  Tensor x = leaf(pat({2, 6, 2, 2}, 0)), w = leaf(pat({6}, 3)), b = leaf(pat({6}, 5));
  Tensor y = group_norm(x, 2, w, b);
  check_values(y, {2, 6, 2, 2}, {
      1.08779456259, -1.74582070661, -4.5794359758, 0.32195259794, -0.455672908778, -1.05856977456,
      -0.0157211418525, -0.618618007639, 3.66809015825, 0.852398849927, 2.48022038755, -0.335470920771,
      -1.09025165981, -3.55183370219, 0.706037938676, -1.7555441037, 0.1, 0.1, 0.1, 0.1, 0.824546949094,
      3.28612899147, -0.971742649396, 1.48983939298, -4.18802963405, 1.03445022192, -1.98479594481, -5.00404211155,
      0.12519952009, -0.517193281342, -1.15958608278, -0.0484201559726, 2.23519498499, -0.764953017373,
      0.969507546496, 2.70396811036, -0.0315992561671, -2.40845262147, -4.78530598677, -0.6739920576, 0.1, 0.1,
      0.1, 0.1, -0.218075704836, 2.15877766047, 4.53563102577, 0.424317096597});
  Tensor(y * pat({2, 6, 2, 2}, 41)).sum().backward();
  check_values(x.grad(), {2, 6, 2, 2}, {
      0.835703289121, -1.99012962917, 2.91904129547, 0.0719646625561, -0.462860165749, 0.587770817865,
      -0.0285874116446, -0.623701926528, -0.537705928172, 1.07665424573, -1.73125471169, -0.116894537791,
      -1.90484902335, 2.34435659895, -0.102235573477, -2.57248363442, 0.14654936695, 0.161539236898,
      0.152873218334, 0.144207199771, 1.75589893504, -2.51063872439, -0.0340668120632, 2.41884921175,
      2.30592062856, -0.078493874015, -3.46475209659, 1.39071570354, 0.0983689634009, 0.842522834364,
      -0.166882022908, -0.174443160186, -1.80714265452, 0.562149573499, 1.92959808153, -1.43756197668,
      -0.548098863942, -2.84805071528, 1.34016472786, -1.16970747241, 0.191979644419, 0.0589608094527,
      0.135862323417, 0.212763837382, 0.272462842846, 2.72621772211, -1.30819469309, 0.935639837242});
  check_values(w.grad(), {6}, {
      -4.64660378963, -4.02656393592, -6.01160340844, -4.02342294793, -7.37081297988, -4.52374077377});
  check_values(b.grad(), {6}, {-0.75, 2.9, -3.55, 5.15, -6.35, 2.35});
}

TEST_CASE("group_norm over [N, C, L] without an affine, eps 1e-3", "[nn][group_norm]") {
  check_values(group_norm(pat({2, 6, 3}, 1), 3, Tensor(), Tensor(), 1e-3), {2, 6, 3}, {
      -1.37129988127, -0.163249985865, 1.04479990954, -1.04479990954, 0.163249985865, 1.37129988127,
      -0.82046559349, 0.385781835349, 1.59202926419, -0.494452774884, 0.711794653955, -1.37468738512,
      -0.311949699197, 1.07310696524, -1.32266672459, 0.0623899398393, 1.44744660427, -0.948327085558,
      0.295279541865, 1.58061401822, -0.642667238177, 0.642667238177, -1.58061401822, -0.295279541865,
      0.948327085558, -1.44744660427, -0.0623899398393, 1.32266672459, -1.07310696524, 0.311949699197,
      -1.37129988127, -0.163249985865, 1.04479990954, -1.04479990954, 0.163249985865, 1.37129988127});
}

TEST_CASE("nn::GroupNorm: keys, shapes, repr and forward", "[nn][group_norm]") {
  nn::GroupNorm gn(3, 6);
  CHECK(gn->repr() == "GroupNorm(3, 6, eps=1e-05, affine=True)");
  CHECK(gn->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(dims(gn->weight) == std::vector<int64_t>{6});
  CHECK(vals(gn->weight) == std::vector<double>(6, 1.0));
  CHECK(vals(gn->bias) == std::vector<double>(6, 0.0));
  CHECK(gn->named_buffers().empty());
  check_values(gn(pat({2, 6, 2, 2}, 2, DType::f32)), {2, 6, 2, 2}, {
      -1.46213185787, -0.146657645702, 1.16881656647, -1.10659825802, 0.20887593925, 1.52435016632, -0.75106471777,
      0.5644094944, 1.60336172581, -0.568387508392, 0.687155067921, -1.48459422588, -0.229051694274, 1.02649092674,
      -1.14525842667, 0.110284142196, 1.16754794121, -0.990518987179, 0.257113456726, 1.50474596024,
      -0.653321027756, 0.594311416149, -1.56375551224, -0.316123068333, 1.16754794121, -0.990518987179,
      0.257113456726, 1.50474584103, -0.653321027756, 0.594311416149, -1.56375551224, -0.316123068333,
      0.766288220882, -1.46291387081, -0.174156412482, 1.11460101604, -1.11460101604, 0.174156412482,
      1.46291387081, -0.766288220882, 0.766288161278, -1.46291387081, -0.174156442285, 1.11460101604,
      -1.11460101604, 0.17415638268, 1.46291387081, -0.766288220882}, 1e-5);
  // The same in eval mode: group norm keeps no statistics.
  gn->eval();
  check_values(gn(pat({2, 6, 2, 2}, 2, DType::f32)), {2, 6, 2, 2}, {
      -1.46213185787, -0.146657645702, 1.16881656647, -1.10659825802, 0.20887593925, 1.52435016632, -0.75106471777,
      0.5644094944, 1.60336172581, -0.568387508392, 0.687155067921, -1.48459422588, -0.229051694274, 1.02649092674,
      -1.14525842667, 0.110284142196, 1.16754794121, -0.990518987179, 0.257113456726, 1.50474596024,
      -0.653321027756, 0.594311416149, -1.56375551224, -0.316123068333, 1.16754794121, -0.990518987179,
      0.257113456726, 1.50474584103, -0.653321027756, 0.594311416149, -1.56375551224, -0.316123068333,
      0.766288220882, -1.46291387081, -0.174156412482, 1.11460101604, -1.11460101604, 0.174156412482,
      1.46291387081, -0.766288220882, 0.766288161278, -1.46291387081, -0.174156442285, 1.11460101604,
      -1.11460101604, 0.17415638268, 1.46291387081, -0.766288220882}, 1e-5);
  nn::GroupNorm plain(3, 6, 1e-3, false);
  CHECK(plain->repr() == "GroupNorm(3, 6, eps=0.001, affine=False)");
  CHECK(plain->state_dict().empty());
  CHECK(nn::GroupNorm(2, 6)->repr() == "GroupNorm(2, 6, eps=1e-05, affine=True)");
}
