// nn::MultiheadAttention, nn::TransformerEncoderLayer, nn::TransformerDecoderLayer,
// nn::TransformerEncoder and sinusoidal_positional_encoding against torch 1.13:
// state-dict keys exactly PyTorch's, outputs and gradients for fixed
// parameters (the i-th parameter = pat(shape, 13 i) * 0.2) and inputs equal to
// torch's float64 numbers (tests/nn/transformer_reference.py prints them) to
// 1e-5, dropout in train() / eval(), deep copies in TransformerEncoder, and
// the errors for user mistakes.
#include "tests/nn/pattern_values.h"

#include <string>
#include <vector>

#include "dsl/indexing.h"
#include "dsl/nn/transformer.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

constexpr double kTol = 1e-5;

// Every parameter, in named_parameters() order: the i-th holds pat(shape, 13 i) * 0.2.
void set_params(nn::Module& m) {
  NoGradGuard g;
  int64_t i = 0;
  for (auto& [name, p] : m.named_parameters()) {
    Tensor v = pat(p.shape().dims, 13 * i++);
    p.data().copy_(Tensor(v * 0.2));
  }
}

Tensor input(const std::vector<int64_t>& shape, int64_t off) { return pat(shape, off, DType::f32); }

// Bool [L, S], true above the diagonal: nn.MultiheadAttention's "not allowed" causal mask.
Tensor causal_blocked(int64_t L, int64_t S) { return triu(ones({L, S}, DType::b8), 1); }

void check_torch(const Tensor& t, const std::vector<int64_t>& shape, const std::vector<double>& want) {
  check_values(t, shape, want, kTol);
}

template <class E, class F>
void require_error(F&& f, const std::string& substring) {
  try {
    f();
  } catch (const E& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains(substring));
    return;
  }
  FAIL("no exception thrown; expected one containing: " << substring);
}

std::vector<std::string> keys(const nn::Module& m) { return m.state_dict().keys(); }

}  // namespace

TEST_CASE("transformer: MultiheadAttention has PyTorch's state-dict keys and initialization", "[nn][transformer]") {
  nn::MultiheadAttention mha(8, 2);
  CHECK(keys(*mha) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(keys(*nn::MultiheadAttention(8, 2, {.bias = false})) == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
  CHECK(dims(mha->in_proj_weight) == std::vector<int64_t>{24, 8});
  CHECK(dims(mha->out_proj->weight) == std::vector<int64_t>{8, 8});
  // xavier_uniform_ on [3E, E]: bound sqrt(6 / (E + 3E)); zero biases.
  const double bound = std::sqrt(6.0 / 32.0);
  for (double v : vals(mha->in_proj_weight)) CHECK(std::abs(v) <= bound);
  CHECK(vals(mha->in_proj_weight.abs().max()).at(0) > bound / 2);
  for (double v : vals(mha->in_proj_bias)) CHECK(v == 0);
  for (double v : vals(mha->out_proj->bias)) CHECK(v == 0);
  CHECK(mha->head_dim == 4);
}

TEST_CASE("transformer: MultiheadAttention matches torch with bool and float masks", "[nn][transformer]") {
  nn::MultiheadAttention mha(8, 2);
  set_params(*mha);
  Tensor q = input({3, 2, 8}, 5), kv = input({4, 2, 8}, 9);
  // key_padding_mask and attn_mask: true = not allowed, as nn.MultiheadAttention.
  Tensor kpm = tensor({{false, false, false, true}, {false, true, false, false}});
  Tensor am = tensor({{false, true, false, false}, {false, false, false, false}, {true, false, false, false}});
  check_torch(mha(q, kv, kv, {.key_padding_mask = kpm, .attn_mask = am}), {3, 2, 8}, {
      -0.7433227608, -0.6746435576, -1.548400617, -1.479721413, 2.137238154, 1.195917358, 1.7530988, 0.1965118265,
      -0.55190916, -0.6700898738, 1.226659986, 1.108479272, 1.243875499, 0.1156947855, 0.5810800684, 0.8392974339,
      -1.054093488, -0.3207539642, -0.6800722913, 0.05326723209, 1.588057403, 1.311396926, 0.5984627625, -0.3213674,
      -0.5862728434, 0.3515639081, -0.7618506183, 0.1759861332, 1.055086517, 0.9829232686, 0.4389441594,
      -0.3062805644, -0.6635898906, -0.08714744744, -1.457633979, -0.8811915362, 1.708262677, 1.274705121,
      1.197279703, -0.1865719114, -0.1123592093, -0.5225165422, 0.9474962527, 0.5373389199, 1.265980037,
      -0.1541772962, 1.454032122, 1.321843631,
  });
  auto [y, w] = mha->forward_with_weights(q, kv, kv, {.key_padding_mask = kpm, .attn_mask = am});
  check_torch(y, {3, 2, 8}, vals(mha(q, kv, kv, {.key_padding_mask = kpm, .attn_mask = am})));
  check_torch(w, {2, 3, 4}, {
      0.05738913094, 0, 0.9426108691, 0, 0.3903441436, 0.1043107398, 0.5053451166, 0, 0, 0.9393743916, 0.0606256084,
      0, 0.048359823, 0, 0.1912390804, 0.7604010966, 0.895017861, 0, 0.01852781669, 0.08645432227, 0, 0,
      0.4998698725, 0.5001301275,
  });
  auto per_head = mha->forward_with_weights(q, kv, kv, {.attn_mask = am, .average_attn_weights = false});
  CHECK(dims(per_head.weights) == std::vector<int64_t>{2, 2, 3, 4});
  // A floating attn_mask is added to the scores.
  Tensor fmask = Tensor(input({3, 4}, 3) * 0.5);
  check_torch(mha(q, kv, kv, {.attn_mask = fmask}), {3, 2, 8}, {
      -0.387444294, -0.5968520826, -0.5362567789, -0.7456645674, 1.675956045, 0.4565482566, 2.056916971,
      0.8965450948, -0.3841697046, -0.3814378526, 0.6587347785, 0.6614666305, 1.219225225, 0.2119570769,
      1.145011127, 0.8306860994, -0.9228482802, -0.6771555991, 0.02178422261, 0.2674769037, 1.567416014,
      0.8031086951, 0.8982514218, 0.3025683906, -0.573629651, 0.3151830685, -0.7664334149, 0.1223793046,
      1.095459238, 0.9742719578, 0.50629465, -0.2630243388, -0.5274747842, 0.4959321905, -0.9364073072,
      0.08699966751, 1.174599699, 1.188006674, 0.2608524568, -0.5054826505, -0.6832894262, 0.3679198396,
      -0.9129602104, 0.1382490553, 1.07238149, 1.113590755, 0.2850753991, -0.4887851562,
  });
}

TEST_CASE("transformer: MultiheadAttention batch_first, unbatched, causal and 3-D masks", "[nn][transformer]") {
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  set_params(*mha);
  Tensor x = input({3, 8}, 7);
  // Unbatched [L, E] self-attention; is_causal is torch's triu bool mask.
  std::vector<double> want{
      -0.57764, 0.46268, -0.917465, 0.122855, 1.13843, 1.16875, 0.251185, -0.508315, -0.6478155681, 0.4028292762,
      -0.9125969624, 0.1380478819, 1.085061912, 1.125706756, 0.2624958922, -0.5022203828, -0.7252275738,
      0.2847811385, -0.9290229922, 0.08098572007, 1.172375126, 1.172383838, 0.3742595694, -0.480862498,
  };
  check_torch(mha(x, x, x, {.is_causal = true}), {3, 8}, want);
  check_torch(mha(x, x, x, {.attn_mask = causal_blocked(3, 3)}), {3, 8}, want);
  // [B * num_heads, L, S] float mask together with a bool key_padding_mask, [B, L, E].
  Tensor xb = input({2, 3, 8}, 11);
  Tensor m3 = Tensor(input({4, 3, 3}, 2) * 0.5);
  Tensor kpm = tensor({{false, false, true}, {false, false, false}});
  check_torch(mha(xb, xb, xb, {.key_padding_mask = kpm, .attn_mask = m3}), {2, 3, 8}, {
      -0.5938859885, 0.4490820621, -0.9167528055, 0.1262152451, 1.120432676, 1.153400727, 0.2518822629,
      -0.5083017099, -0.5937999392, 0.4491679735, -0.9167789223, 0.1261889903, 1.120224043, 1.153191956,
      0.2517750693, -0.5083770727, -0.5956954265, 0.4472508771, -0.9161639662, 0.1267823375, 1.125359254,
      1.158305558, 0.2543200077, -0.5065833609, -0.5085107674, -0.7038485642, -0.5579147689, -0.7532525658,
      1.885023313, 0.6796855158, 1.582173077, 0.6051237113, -0.8858513287, -0.6234098954, -0.5803036819,
      -0.3178622486, 1.712945281, 0.9653867139, 0.9002170052, 0.05018606941, -0.7794821565, -0.1508393038,
      -1.373322567, -0.7446797138, 1.598400641, 1.217043494, 1.167145646, -0.1857393557,
  });
  // is_causal together with a padding mask: both must allow a key (the same
  // as one [B * num_heads, L, S] bool mask holding both).
  Tensor blocked = binary_op(ir::Op::Or, causal_blocked(3, 3).reshape({1, 3, 3}), kpm.reshape({2, 1, 3}));
  Tensor per_head = blocked.unsqueeze(1).expand({2, 2, 3, 3}).reshape({4, 3, 3});
  check_values(mha(xb, xb, xb, {.key_padding_mask = kpm, .is_causal = true}), {2, 3, 8},
               vals(mha(xb, xb, xb, {.attn_mask = per_head})), 1e-6);
  // Self-attention through the one-argument call is forward(x, x, x).
  CHECK(allclose(mha(xb), mha(xb, xb, xb), 0, 0));
}

TEST_CASE("transformer: MultiheadAttention dropout acts in train() only", "[nn][transformer]") {
  nn::MultiheadAttention drop(8, 2, {.dropout = 0.5}), plain(8, 2);
  set_params(*drop);
  set_params(*plain);
  Tensor q = input({3, 2, 8}, 5), kv = input({4, 2, 8}, 9);
  drop->eval();
  Tensor a = drop(q, kv, kv), b = drop(q, kv, kv);
  CHECK(allclose(a, b, 0, 0));                                    // eval: deterministic
  CHECK(allclose(a, plain(q, kv, kv), 1e-6, 1e-6));               // and no dropout at all
  drop->train();
  manual_seed(3);
  CHECK_FALSE(allclose(drop(q, kv, kv), a, 1e-3, 1e-3));         // train: weights dropped
  plain->train();
  CHECK(allclose(plain(q, kv, kv), a, 1e-6, 1e-6));               // p = 0 in train = eval
}

TEST_CASE("transformer: TransformerEncoderLayer matches torch (post-norm relu, pre-norm gelu)", "[nn][transformer]") {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  CHECK(keys(*layer) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  set_params(*layer);
  Tensor kpm = tensor({{false, false, true}, {false, false, false}});
  check_torch(layer(input({3, 2, 8}, 4), {.src_key_padding_mask = kpm}), {3, 2, 8}, {
      -0.3490625548, 0.3925138015, -0.9104961065, 0.1182274804, 0.2009188145, -0.548352259, 0.1335074789,
      0.1646179761, 0.005695627118, 0.3848047262, -0.9181972394, -0.02259032563, 0.368325487, -0.7154438354,
      0.1378598105, 0.09007895711, -0.01834626769, 0.362400461, -0.8447067677, 0.005105554627, 0.3522468803,
      -0.8680347458, 0.1351425769, 0.02491525871, -0.2324608511, 0.3762771465, -0.6546608871, 0.1799553545,
      0.3826823041, -0.8571227909, 0.1320802129, 0.1993604474, -0.2857056672, 0.4175001405, -0.7005702896,
      0.1402900167, 0.3852194687, -0.642953586, 0.1378738972, 0.2590427755, -0.2429451727, 0.4308002098,
      -0.7100848278, 0.09485687919, 0.3932871264, -0.6203888402, 0.1405189914, 0.25202507,
  });

  nn::TransformerEncoderLayer pre(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = "gelu",
                                         .batch_first = true, .norm_first = true});
  set_params(*pre);
  std::vector<double> want{
      -1.373623109, 0.04847060901, 1.149946516, -2.712938609, 1.172504544, 2.69192601, -1.186415812, 1.614337464,
      3.354559648, -0.2754000549, 0.9313433402, -2.859220111, 0.6325761256, 2.33277029, -1.695401975, 1.163886442,
      3.007030853, -0.610477088, 0.6173260779, -3.159447829, 0.2463567583, 1.955068801, -2.091799068, 0.8185927762,
      2.58161935, -0.8137911241, 0.4828436054, 2.020208323, -0.4346144886, 1.46272015, -2.708771492, 0.2714017856,
      2.044940014, -1.198246981, 0.03048767908, 1.637708472, -0.7519462537, 1.163419799, 2.012528604, -0.3082932232,
      1.666274024, -1.578867436, -0.3610002998, 1.243746011, -1.077496669, 0.8431994583, 1.65077362, -0.6806909969,
  };
  check_torch(pre(input({2, 3, 8}, 6), {.is_causal = true}), {2, 3, 8}, want);
  check_torch(pre(input({2, 3, 8}, 6), {.src_mask = causal_blocked(3, 3)}), {2, 3, 8}, want);
  // Unbatched [S, E] is the batch of one.
  Tensor one = input({2, 3, 8}, 6).select(0, 1);
  check_torch(pre(one, {.is_causal = true}), {3, 8}, std::vector<double>(want.begin() + 24, want.end()));
}

TEST_CASE("transformer: TransformerEncoderLayer dropout: eval() deterministic, train() with p = 0 equals eval()",
          "[nn][transformer]") {
  Tensor src = input({3, 2, 8}, 4);
  nn::TransformerEncoderLayer zero(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  set_params(*zero);
  CHECK(zero->is_training());
  Tensor train_out = zero(src);
  zero->eval();
  Tensor eval_out = zero(src);
  CHECK(allclose(train_out, eval_out, 1e-6, 1e-6));

  nn::TransformerEncoderLayer drop(8, 2, {.dim_feedforward = 16, .dropout = 0.5});
  set_params(*drop);
  drop->eval();
  CHECK_FALSE(drop->self_attn->is_training());
  Tensor a = drop(src), b = drop(src);
  CHECK(allclose(a, b, 0, 0));
  CHECK(allclose(a, eval_out, 1e-6, 1e-6));  // same parameters: dropout off in eval
  drop->train();
  manual_seed(11);
  Tensor t1 = drop(src), t2 = drop(src);
  CHECK_FALSE(allclose(t1, a, 1e-3, 1e-3));
  CHECK_FALSE(allclose(t1, t2, 1e-3, 1e-3));  // fresh masks each call
}

TEST_CASE("transformer: gradients through a TransformerEncoderLayer match torch's", "[nn][transformer][autograd]") {
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 6, .dropout = 0.0});
  set_params(*layer);
  Tensor src = leaf(input({3, 2, 4}, 16));
  Tensor kpm = tensor({{false, false, true}, {false, false, false}});
  Tensor(layer(src, {.src_key_padding_mask = kpm}) * input({3, 2, 4}, 17)).sum().backward();
  check_torch(src.grad(), {3, 2, 4}, {
      -0.3121340652, 0.1917759338, -0.1398337704, 0.289081242, 0.08352071047, 0.03308078757, 0.02559955377,
      -0.1436765663, -0.3516274077, 0.2378315846, -0.08799105825, 0.2024010941, 0.2342359089, -0.08302903168,
      -0.09705960579, -0.05942584619, -0.3048649495, 0.1764038467, -0.08669625621, 0.2148786418, 0.2257239606,
      -0.05090867904, -0.06947454135, -0.1172005191,
  });
  check_torch(layer->self_attn->in_proj_weight.grad(), {12, 4}, {
      -0.002582407053, -0.002003712414, 0.002881064826, -0.002426003097, 0.001850082665, 0.001435495461,
      -0.002064046443, 0.001738032069, 0.0009319931331, 0.0002793084049, -0.0008411341439, 0.0007555918552,
      0.0005974314956, 0.0001790438493, -0.0005391885538, 0.0004843537533, 0.004623588074, 0.004623588074,
      0.004623588074, 0.004623588074, -0.002444671155, -0.002444671155, -0.002444671155, -0.002444671155,
      -0.0007036990371, -0.0007036990371, -0.0007036990371, -0.0007036990371, 0.0009966417418, 0.0009966417418,
      0.0009966417418, 0.0009966417418, -1.064548196, -0.3005333906, 1.204170723, -0.8580577079, 1.363667249,
      0.4996635068, -1.592832545, 1.130152724, 1.404258835, 0.5402550932, -1.552240959, 1.17074431, -1.092980302,
      -0.3289654973, 1.175738616, -0.8864898146,
  });
  check_torch(layer->linear1->weight.grad(), {6, 4}, {
      0.2841273588, 0.1218432437, -0.02334120772, 0.3370073665, 0, 0, 0, 0, 0, 0, 0, 0, 0.5113903816, 0.1403024508,
      1.775598898, 0.6073508635, 0, 0, 0, 0, 0.1279184091, -0.0004005552994, 1.260317154, 0.1521468927,
  });
  check_torch(layer->norm1->weight.grad(), {4}, {
      -3.951158586, -0.4575902581, -6.930293505, 0.1941714708,
  });
}

TEST_CASE("transformer: TransformerDecoderLayer matches torch", "[nn][transformer]") {
  nn::TransformerDecoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  CHECK(keys(*layer) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"});
  set_params(*layer);
  Tensor mkpm = tensor({{false, false, false, true}, {true, false, false, false}});
  std::vector<double> want{
      -0.5940180778, -0.0404057914, 0.3571347587, 0.5291567377, 0.1449470798, -0.3930967002, -0.09999486959,
      0.3462165543, -0.4507109603, -0.0855394467, 0.416969195, 0.3646399373, 0.157019168, -0.5556013257,
      0.06665764995, 0.3066776455, -0.6154023568, -0.0412771447, 0.3607651465, 0.5216137541, 0.143172047,
      -0.42154664, -0.1148418206, 0.3427189349, -0.429768923, -0.1046134023, 0.432889556, 0.1668386765,
      0.1498433001, -0.7387164253, 0.0733706824, 0.2891573489, -0.5987717968, -0.0503532236, 0.3645749342,
      0.4962132221, 0.1414669195, -0.4428955989, -0.1127814503, 0.3348573899, -0.4027171072, -0.09852597569,
      0.4423464663, 0.2202057479, 0.1496134405, -0.6067451114, 0.1152617703, 0.3055586012,
  };
  Tensor tgt = input({3, 2, 8}, 8), memory = input({4, 2, 8}, 10);
  check_torch(layer(tgt, memory, {.memory_key_padding_mask = mkpm, .tgt_is_causal = true}), {3, 2, 8}, want);
  check_torch(layer(tgt, memory, {.tgt_mask = causal_blocked(3, 3), .memory_key_padding_mask = mkpm}), {3, 2, 8},
              want);

  nn::TransformerDecoderLayer pre(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = "gelu",
                                         .batch_first = true, .norm_first = true});
  set_params(*pre);
  check_torch(pre(input({2, 3, 8}, 12), input({2, 4, 8}, 14), {.memory_mask = Tensor(input({3, 4}, 1) * 0.5)}),
              {2, 3, 8}, {
      -1.795728451, 0.5909290072, 1.113188535, -3.422518693, 2.579661399, 3.859912969, 0.3573412991, 2.253684935,
      -2.002749045, 0.4015130267, 0.9297494808, -3.632119697, 2.174955841, 3.702263613, 0.209012332, 2.107430948,
      2.598583164, -0.2695736278, 0.2859685968, -4.168194243, 2.199946129, 3.332099067, -0.4934998176, 1.59894453,
      1.700378733, 0.002228981018, 1.375634244, -2.778741332, 0.4606047301, 1.51299946, -1.0380828, 2.143904967,
      1.634370365, -0.4774864496, 0.7128701866, 1.587119909, 0.1005753778, 1.73697132, -0.9644548864, 2.111113822,
      1.398767234, -0.7984457976, 0.3592062602, 1.159921296, -0.3562242289, 1.506755822, 3.880446363, 1.864924085,
  });
}

TEST_CASE("transformer: TransformerEncoder deep-copies the layer and matches torch", "[nn][transformer]") {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  nn::TransformerEncoder encoder(layer, 2, nn::LayerNorm(8));
  CHECK(keys(*encoder) == std::vector<std::string>{"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias", "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias", "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight", "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.0.norm1.bias", "layers.0.norm2.weight", "layers.0.norm2.bias", "layers.1.self_attn.in_proj_weight", "layers.1.self_attn.in_proj_bias", "layers.1.self_attn.out_proj.weight", "layers.1.self_attn.out_proj.bias", "layers.1.linear1.weight", "layers.1.linear1.bias", "layers.1.linear2.weight", "layers.1.linear2.bias", "layers.1.norm1.weight", "layers.1.norm1.bias", "layers.1.norm2.weight", "layers.1.norm2.bias", "norm.weight", "norm.bias"});
  CHECK(encoder->layers->size() == 2);
  // Copies: the layer's values, their own memory.
  auto l0 = (*encoder->layers)[0].as<nn::TransformerEncoderLayer>();
  auto l1 = (*encoder->layers)[1].as<nn::TransformerEncoderLayer>();
  CHECK(equal(l0->linear1->weight, layer->linear1->weight));
  CHECK(equal(l1->self_attn->in_proj_weight, layer->self_attn->in_proj_weight));
  CHECK_FALSE(l0->linear1->weight.is_same(layer->linear1->weight));
  {
    NoGradGuard g;
    l0->linear1->weight.data().fill_(0.5);
  }
  CHECK_FALSE(equal(l1->linear1->weight, l0->linear1->weight));
  CHECK_FALSE(equal(layer->linear1->weight, l0->linear1->weight));
  CHECK(encoder->parameters().size() == 2 * 12 + 2);  // `layer` itself is not registered

  set_params(*encoder);
  check_torch(encoder(input({3, 2, 8}, 15), {.is_causal = true}), {3, 2, 8}, {
      -1.076746683, 0.1486042451, 0.5944893415, -0.1561297755, 0.2012721754, -0.422851196, 0.2008264451,
      0.334406599, -1.075933276, 0.148452592, 0.5949094063, -0.1570219487, 0.2013525792, -0.423379326, 0.2022031122,
      0.3344842618, -1.07638495, 0.1484987719, 0.5947768821, -0.157106052, 0.2011691281, -0.423367665, 0.2016893867,
      0.3346070188, -1.075665651, 0.1436720757, 0.5851750569, -0.1056465777, 0.2080429124, -0.3906148169,
      0.2211259697, 0.3310877225, -1.084641978, 0.1426173594, 0.5709308405, -0.1449851831, 0.204977151,
      -0.3997563449, 0.2287373162, 0.3273443743, -1.086600702, 0.1421738495, 0.5699083302, -0.1478639713,
      0.2027458149, -0.3975163892, 0.2302971165, 0.330121068,
  });
  // Without a final norm; eval() reaches every copy.
  nn::TransformerEncoder bare(layer, 3);
  CHECK(keys(*bare).size() == 3 * 12);
  bare->eval();
  for (const auto& l : *bare->layers) CHECK_FALSE(l.as<nn::TransformerEncoderLayer>()->dropout1->is_training());
  // The copies keep the layer's training flags and options.
  layer->eval();
  nn::TransformerEncoder from_eval(layer, 1);
  CHECK_FALSE((*from_eval->layers)[0]->is_training());
}

TEST_CASE("transformer: sinusoidal_positional_encoding is the Attention Is All You Need table", "[nn][transformer]") {
  check_values(sinusoidal_positional_encoding(4, 6, DType::f64), {4, 6}, {
      0, 1, 0, 1, 0, 1, 0.8414709848, 0.5403023059, 0.04639922346, 0.998922976, 0.002154433023, 0.9999976792,
      0.9092974268, -0.4161468365, 0.09269850078, 0.9956942241, 0.004308856047, 0.9999907168, 0.1411200081,
      -0.9899924966, 0.1387981011, 0.9903206991, 0.00646325907, 0.9999791129,
  }, 1e-9);  // the expected values are printed to 10 digits
  check_values(sinusoidal_positional_encoding(3, 5, DType::f64), {3, 5}, {
      0, 1, 0, 1, 0, 0.8414709848, 0.5403023059, 0.02511622291, 0.9996845379, 0.0006309573026, 0.9092974268,
      -0.4161468365, 0.05021659939, 0.9987383507, 0.001261914354,
  }, 1e-9);  // the expected values are printed to 10 digits
  Tensor pe = sinusoidal_positional_encoding(50, 16);
  CHECK(pe.dtype() == DType::f32);
  CHECK(dims(pe) == std::vector<int64_t>{50, 16});
  CHECK_FALSE(pe.requires_grad());
}

TEST_CASE("transformer: clear errors for user mistakes", "[nn][transformer][errors]") {
  require_error<ValueError>([] { nn::MultiheadAttention(10, 3); }, "embed_dim must be divisible by num_heads");
  require_error<ValueError>([] { nn::TransformerEncoderLayer(10, 4); }, "embed_dim must be divisible by num_heads");
  require_error<ValueError>([] { nn::MultiheadAttention(8, 2, {.dropout = 1.5}); }, "dropout must be in [0, 1]");
  require_error<ValueError>([] { nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}); },
                            "activation should be \"relu\" or \"gelu\", not \"tanh\"");
  require_error<ValueError>([] { nn::TransformerDecoderLayer(8, 2, {.activation = "swish"}); },
                            "activation should be");

  nn::MultiheadAttention mha(8, 2);
  Tensor q = input({3, 2, 8}, 1), kv = input({4, 2, 8}, 2);
  require_error<ShapeError>([&] { mha(rand({1, 3, 2, 8})); }, "query must be 3-D [L, B, E] (batch_first=false)");
  require_error<ShapeError>([&] { mha(rand({3, 2, 6})); }, "must have last dim embed_dim = 8");
  require_error<ShapeError>([&] { mha(q, kv, rand({5, 2, 8})); },
                            "key shape [4, 2, 8] does not match value shape [5, 2, 8]");
  require_error<ShapeError>([&] { mha(q, rand({4, 8}), rand({4, 8})); }, "must have the same rank");
  require_error<ShapeError>([&] { mha(q, rand({4, 3, 8}), rand({4, 3, 8})); },
                            "query and key must have the same batch size");
  require_error<ShapeError>([&] { mha(q, kv, kv, {.key_padding_mask = zeros({4, 2}, DType::b8)}); },
                            "key_padding_mask must have shape [2, 4]");
  require_error<DTypeError>([&] { mha(q, kv, kv, {.key_padding_mask = zeros({2, 4}, DType::i64)}); },
                            "key_padding_mask must be bool");
  require_error<ShapeError>([&] { mha(q, kv, kv, {.attn_mask = zeros({3, 3}, DType::b8)}); },
                            "the 2-D attn_mask must have shape [L, S] = [3, 4]");
  require_error<ShapeError>([&] { mha(q, kv, kv, {.attn_mask = zeros({2, 3, 4}, DType::b8)}); },
                            "the 3-D attn_mask must have shape [B * num_heads, L, S] = [4, 3, 4]");
  require_error<DTypeError>([&] { mha(q.to(DType::i64)); }, "query must be floating");

  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16});
  require_error<ShapeError>([&] { enc(rand({3, 2, 6})); }, "src must have last dim d_model = 8");
  require_error<ShapeError>([&] { enc(rand({8})); }, "src must be 3-D [T, B, 8] or 2-D [T, 8] (unbatched)");
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16});
  require_error<ModuleError>([&] { dec(rand({3, 2, 8})); }, "a decoder layer needs the encoder's output");
  require_error<ShapeError>([&] { dec(rand({3, 2, 8}), rand({4, 8})); },
                            "tgt and memory must both be batched or both unbatched");
  require_error<ShapeError>([&] { dec(rand({3, 2, 8}), rand({4, 2, 4})); }, "memory must have last dim d_model = 8");
  require_error<ValueError>([&] { nn::TransformerEncoder(enc, 0); }, "num_layers must be positive, got 0");
  require_error<ValueError>([] { sinusoidal_positional_encoding(4, 0); }, "d_model positive");
}
