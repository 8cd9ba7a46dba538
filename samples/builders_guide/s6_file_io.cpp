// Builders' Guide, section 6: file I/O (S6.1-S6.5).
// Each block below reproduces one snippet of the chapter, in order.
// Checkpoints are safetensors files: PyTorch reads them with
// safetensors.torch.load_file, and tessel reads PyTorch's the same way.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>

#include "dsl/io.h"
#include "dsl/tessel.h"

using namespace tessel;
namespace fs = std::filesystem;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

// Snippet: class MLP(nn.Module): hidden = nn.LazyLinear(256); output = nn.LazyLinear(10)
//          forward: self.output(F.relu(self.hidden(x)))
struct MLPImpl : nn::Module {
  nn::LazyLinear hidden{256}, output{10};
  MLPImpl() : Module("MLP") {
    register_module("hidden", hidden);
    register_module("output", output);
  }
  Tensor forward(const Tensor& x) override { return output(relu(hidden(x))); }
};
TESSEL_MODULE(MLP);

// A safetensors file starts with an 8-byte little-endian header length and a JSON header.
static std::string safetensors_header(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  unsigned char len[8] = {};
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  std::string json(n, '\0');
  f.read(json.data(), static_cast<std::streamsize>(n));
  while (!json.empty() && json.back() == ' ') json.pop_back();  // padding to 8-byte alignment
  return json;
}

int main() {
  manual_seed(0);
  // Files go to a fresh folder so that runs never see each other's files.
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel-builders-guide-s6-{}", getpid());
  fs::create_directories(dir);

  // Snippet: x = torch.arange(4); torch.save(x, 'x-file')
  //          x2 = torch.load('x-file'); x2
  Tensor x = arange(4);
  save(x, dir / "x-file");
  Tensor x2 = load_tensor(dir / "x-file");
  fmt::print("{}\n", x2);
  fmt::print("S6.1 dtype kept: {}\n", x2.dtype());
  fmt::print("S6.1 x-file header: {}\n", safetensors_header(dir / "x-file"));

  // The text: "an individual tensor (or a list of tensors)".
  // D2L's snippet: y = torch.zeros(4); torch.save([x, y], 'x-files'); x2, y2 = torch.load('x-files')
  Tensor y = zeros({4});
  save(std::vector<Tensor>{x, y}, dir / "x-files");
  auto xy = load_list(dir / "x-files");
  fmt::print("S6.2 ({}, {})\n", xy.at(0), xy.at(1));

  // Snippet: mydict = {'x': x, 'y': y}; torch.save(mydict, 'mydict')
  //          mydict2 = torch.load('mydict'); mydict2
  std::map<std::string, Tensor> mydict{{"x", x}, {"y", y}};
  save(mydict, dir / "mydict");
  auto mydict2 = load_dict(dir / "mydict");
  std::string items;
  for (auto& [k, v] : mydict2) items += fmt::format("{}'{}': {}", items.empty() ? "" : ", ", k, v);
  fmt::print("{{{}}}\n", items);

  // Snippet: net = MLP(); X = torch.randn(size=(2, 20)); Y = net(X)
  //          torch.save(net.state_dict(), 'mlp.params')
  MLP net;
  Tensor X = randn({2, 20});
  Tensor Y = net(X);
  save(net->state_dict(), dir / "mlp.params");
  std::string keys;
  for (auto& [k, v] : load_dict(dir / "mlp.params")) keys += fmt::format("{}{} {}", keys.empty() ? "" : ", ", k, v.shape());
  fmt::print("S6.3 mlp.params: {}\n", keys);

  // Snippet: clone = MLP(); clone.load_state_dict(torch.load('mlp.params')); clone.eval()
  // Only parameters are saved, not code: the architecture is built in code
  // (lazy layers and all), then the file fills it.
  MLP clone;
  clone->load_state_dict(load_dict(dir / "mlp.params"));
  clone->eval();
  fmt::print("S6.4 clone:\n{}\n", clone->repr());

  // D2L's next snippet: Y_clone = clone(X); Y_clone == Y
  // (Compared detached: a comparison of two graph tensors would otherwise
  // print a grad_fn, which PyTorch does not give boolean results.)
  Tensor Y_clone = clone(X);
  fmt::print("S6.3 {}\n", Y_clone.detach() == Y.detach());
  fmt::print("S6.3 bit-identical: {}\n", py_bool(Y_clone.to_vector<float>() == Y.to_vector<float>()));

  // load_state_dict is strict: missing, unexpected or mis-shaped keys are an
  // error that lists them; strict=false reports them instead.
  auto partial = load_dict(dir / "mlp.params");
  OrderedDict<Tensor> wrong;
  for (auto& [k, v] : partial)
    if (k != "output.bias") wrong.insert(k == "hidden.bias" ? "hidden.b" : k, v);
  try {
    MLP().ptr()->load_state_dict(wrong);
    fmt::print("S6.5 strict load of a wrong dict worked (unexpected)\n");
  } catch (const CheckpointError& e) {
    fmt::print("S6.5 strict: CheckpointError: {}\n", e.what());
  }
  MLP lenient;
  auto result = lenient->load_state_dict(wrong, /*strict=*/false);
  fmt::print("S6.5 non-strict: missing [{}], unexpected [{}]\n", fmt::join(result.missing_keys, ", "),
             fmt::join(result.unexpected_keys, ", "));

  fs::remove_all(dir);
}
